// densefs_rs_deflate_join on untrusted bytes (the skeleton and plain text
// of a stored deflate chunk). Input: 3 bytes of output bound (at most
// 4 MiB), 2 bytes of skeleton length, the skeleton, then the plain text.
// Properties: no crash, no panic escaping, output within the bound. A panic
// inside preflate-rs, caught by the C ABI, is allowed.
#![no_main]
use densefs_codec_rs::*;
use libfuzzer_sys::fuzz_target;
mod common;

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    common::let_caught_panics_be();
    let max_out = common::u24(data) % ((4 << 20) + 1);
    let skeleton_len = (data[3] as usize | (data[4] as usize) << 8).min(data.len() - 5);
    let (skeleton, plain) = data[5..].split_at(skeleton_len);
    // SAFETY: both are live slices.
    let r = common::take(unsafe {
        densefs_rs_deflate_join(skeleton.as_ptr(), skeleton.len(), plain.as_ptr(), plain.len(), max_out)
    });
    if r.status == DENSEFS_RS_OK {
        assert!(r.bytes.len() <= max_out);
    }
});
