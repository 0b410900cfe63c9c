// densefs_rs_lepton_decode on untrusted bytes (a stored Lepton chunk).
// Input: 3 bytes of output bound (at most 8 MiB), then the Lepton file.
// Properties: no crash, output within the bound. A panic inside
// lepton_jpeg, caught by the C ABI, is allowed (common::let_caught_panics_be).
#![no_main]
use densefs_codec_rs::*;
use libfuzzer_sys::fuzz_target;
mod common;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    common::let_caught_panics_be();
    let max_out = common::u24(data) % ((8 << 20) + 1);
    let lep = &data[3..];
    // SAFETY: `lep` is a live slice.
    let r = common::take(unsafe { densefs_rs_lepton_decode(lep.as_ptr(), lep.len(), max_out, 1) });
    if r.status == DENSEFS_RS_OK {
        assert!(r.bytes.len() <= max_out);
    }
});
