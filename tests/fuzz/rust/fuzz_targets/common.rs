// Shared by the targets: take a result's bytes and free it exactly once.
#![allow(dead_code)] // each target uses a part
use densefs_codec_rs::{densefs_rs_free, densefs_rs_result, DENSEFS_RS_OK};

pub struct Output {
    pub status: i32,
    pub bytes: Vec<u8>,
}

pub fn take(mut r: densefs_rs_result) -> Output {
    let bytes = if r.status == DENSEFS_RS_OK && !r.data.is_null() {
        // SAFETY: an OK result holds `len` bytes at `data` until freed.
        unsafe { std::slice::from_raw_parts(r.data, r.len) }.to_vec()
    } else {
        Vec::new()
    };
    if r.status == DENSEFS_RS_OK {
        assert!(r.error.is_null(), "an OK result carries no error");
    } else {
        assert!(!r.error.is_null(), "a failed result says why");
    }
    let status = r.status;
    // SAFETY: a live result of the library, freed once.
    unsafe { densefs_rs_free(&mut r) };
    Output { status, bytes }
}

/// libfuzzer-sys aborts on every panic, even one the C ABI catches
/// (guarded() turns it into DENSEFS_RS_PANIC, which densefs reports as a
/// corrupt chunk). lepton_jpeg 0.5.8 panics on some corrupt headers (an
/// index out of bounds, an overflowing subtraction), so the Lepton decode
/// target lets caught panics be; a panic that escapes a target still aborts
/// (libfuzzer-sys checks the target's own result).
pub fn let_caught_panics_be() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::panic::set_hook(Box::new(|_| {})));
}

pub fn u24(b: &[u8]) -> usize {
    b[0] as usize | (b[1] as usize) << 8 | (b[2] as usize) << 16
}
