// densefs_rs_deflate_split then densefs_rs_deflate_join: whatever split
// takes (gzip files) must join back to exactly the input; whatever it
// refuses is refused with a status, not a crash. Input: the container.
#![no_main]
use densefs_codec_rs::*;
use libfuzzer_sys::fuzz_target;
mod common;

fuzz_target!(|data: &[u8]| {
    common::let_caught_panics_be();
    // SAFETY: `data` is a live slice.
    let split = common::take(unsafe { densefs_rs_deflate_split(data.as_ptr(), data.len()) });
    if split.status != DENSEFS_RS_OK {
        return;
    }
    let b = &split.bytes;
    let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let (skeleton, plain) = b[8..].split_at(n);
    // SAFETY: both are live slices.
    let joined = common::take(unsafe {
        densefs_rs_deflate_join(skeleton.as_ptr(), skeleton.len(), plain.as_ptr(), plain.len(), data.len())
    });
    assert_eq!(joined.status, DENSEFS_RS_OK);
    assert!(joined.bytes == data, "deflate join differs from the input");
});
