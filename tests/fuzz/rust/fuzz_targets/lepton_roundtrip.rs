// Lepton encode -> decode on JPEG-like input. Encoding without
// verification can silently produce a file that decodes to other bytes
// (FIELD-NOTES: lepton_jpeg's known behaviour; densefs always decodes and
// compares before admitting), so a mismatch is not asserted here; what is:
// no crash, no panic, and an accepted encoding decodes (or is refused
// cleanly) within the bound.
#![no_main]
use densefs_codec_rs::*;
use libfuzzer_sys::fuzz_target;
mod common;

fuzz_target!(|data: &[u8]| {
    // SAFETY: `data` is a live slice.
    let e = common::take(unsafe { densefs_rs_lepton_encode(data.as_ptr(), data.len(), 1) });
    assert_ne!(e.status, DENSEFS_RS_PANIC);
    if e.status != DENSEFS_RS_OK {
        return;
    }
    let max_out = data.len();
    // SAFETY: `e.bytes` is a live slice.
    let d = common::take(unsafe {
        densefs_rs_lepton_decode(e.bytes.as_ptr(), e.bytes.len(), max_out, 1)
    });
    assert_ne!(d.status, DENSEFS_RS_PANIC);
    assert!(d.bytes.len() <= max_out);
});
