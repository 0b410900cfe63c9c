// Broccoli compress -> decompress == input, and concat of two compressed
// halves decompresses to the whole. Input: quality, window, cut position
// bytes, then the plain data.
#![no_main]
use densefs_codec_rs::*;
use libfuzzer_sys::fuzz_target;
mod common;

fn compress(plain: &[u8], quality: i32, lgwin: i32) -> Vec<u8> {
    // SAFETY: `plain` is a live slice.
    let r = common::take(unsafe {
        densefs_rs_broccoli_compress(plain.as_ptr(), plain.len(), quality, lgwin)
    });
    assert_eq!(r.status, DENSEFS_RS_OK, "brotli takes any input");
    r.bytes
}

fn decompress(stored: &[u8], max_out: usize) -> Vec<u8> {
    // SAFETY: `stored` is a live slice.
    let r = common::take(unsafe {
        densefs_rs_broccoli_decompress(stored.as_ptr(), stored.len(), max_out)
    });
    assert_eq!(r.status, DENSEFS_RS_OK, "a fresh encoding decodes");
    r.bytes
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let quality = (data[0] % 12) as i32;
    let lgwin = 10 + (data[1] % 15) as i32;
    let plain = &data[3..];
    let whole = compress(plain, quality, lgwin);
    assert_eq!(decompress(&whole, plain.len()), plain);

    let cut = if plain.is_empty() {
        0
    } else {
        data[2] as usize % plain.len()
    };
    let (a, b) = (
        compress(&plain[..cut], quality, lgwin),
        compress(&plain[cut..], quality, lgwin),
    );
    let pieces = [a.as_ptr(), b.as_ptr()];
    let lens = [a.len(), b.len()];
    // SAFETY: both pieces are live slices with their lengths.
    let joined =
        common::take(unsafe { densefs_rs_broccoli_concat(pieces.as_ptr(), lens.as_ptr(), 2) });
    assert_eq!(joined.status, DENSEFS_RS_OK);
    assert_eq!(decompress(&joined.bytes, plain.len()), plain);
});
