// densefs_rs_lepton_decode on untrusted bytes (a stored Lepton chunk).
// Input: 3 bytes of output bound (at most 8 MiB), then the Lepton file.
// Properties: no crash, no panic (even a caught one), output within the bound.
#![no_main]
use densefs_codec_rs::*;
use libfuzzer_sys::fuzz_target;
mod common;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let max_out = common::u24(data) % ((8 << 20) + 1);
    let lep = &data[3..];
    // SAFETY: `lep` is a live slice.
    let r = common::take(unsafe { densefs_rs_lepton_decode(lep.as_ptr(), lep.len(), max_out, 1) });
    assert_ne!(r.status, DENSEFS_RS_PANIC);
    assert!(r.bytes.len() <= max_out);
});
