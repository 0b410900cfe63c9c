// densefs_rs_broccoli_decompress on untrusted bytes (a stored Broccoli chunk
// or a plain brotli stream). Input: 3 bytes of output bound, then the stream.
// Properties: no crash, no panic, output within the bound.
#![no_main]
use densefs_codec_rs::*;
use libfuzzer_sys::fuzz_target;
mod common;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let max_out = common::u24(data) % ((4 << 20) + 1);
    let stored = &data[3..];
    // SAFETY: `stored` is a live slice.
    let r = common::take(unsafe {
        densefs_rs_broccoli_decompress(stored.as_ptr(), stored.len(), max_out)
    });
    assert_ne!(r.status, DENSEFS_RS_PANIC);
    assert!(r.bytes.len() <= max_out);
});
