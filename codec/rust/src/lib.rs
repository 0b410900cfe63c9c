//! densefs' Rust glue: Lepton (Microsoft's `lepton_jpeg`) and Broccoli
//! (Dropbox's catable `brotli`) behind a small C ABI, declared in
//! `../densefs_codec_rs.h`.
//!
//! Rules every entry point follows:
//! - it never unwinds into C: the body runs under `catch_unwind` and a panic
//!   becomes `DENSEFS_RS_PANIC` with the panic message;
//! - it returns a `densefs_rs_result` whose `data`/`error` are owned by Rust
//!   and released with `densefs_rs_free`;
//! - decoders treat their input as hostile: output is bounded by the caller's
//!   `max_out` and working memory by fixed limits (window size, image size).

use std::ffi::{c_char, CString};
use std::io::{Cursor, Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};

use brotli::concat::{BroCatli, BroCatliResult};
use brotli::enc::BrotliEncoderParams;
use brotli::{BrotliDecompressStream, BrotliResult, BrotliState, HeapAlloc, HuffmanCode};
use lepton_jpeg::{EnabledFeatures, LeptonThreadPool, SingleThreadPool, DEFAULT_THREAD_POOL};

mod alloc_budget;

pub const DENSEFS_RS_OK: i32 = 0;
/// The input is valid but this codec does not take it (Lepton: not a JPEG it
/// can recompress). Not corruption: the caller falls back to another codec.
pub const DENSEFS_RS_REJECTED: i32 = 1;
/// The input is corrupt, truncated or has trailing bytes.
pub const DENSEFS_RS_CORRUPT: i32 = 2;
/// The output would exceed `max_out`.
pub const DENSEFS_RS_TOO_LARGE: i32 = 3;
/// A bad argument (null pointer, quality or window out of range).
pub const DENSEFS_RS_BAD_ARGUMENT: i32 = 4;
/// A panic inside Rust, caught at the boundary.
pub const DENSEFS_RS_PANIC: i32 = 5;

/// Lepton refuses JPEGs wider or taller than this, when encoding and when
/// decoding. It bounds a hostile file's coefficient buffers: about 6 bytes
/// per pixel at 4:4:4, so at most ~400 MiB for 8192 x 8192 (a 50-megapixel
/// photo, 8160 x 6120, still fits). Larger images fall back to zstd.
const LEPTON_MAX_SIDE: u32 = 8192;

/// Largest brotli window a stream may declare (the format's non-large
/// maximum); the decoder refuses large-window streams, so its ring buffer is
/// at most 16 MiB whatever the input says.
const BROTLI_MAX_LGWIN: i32 = 24;
const BROTLI_MIN_LGWIN: i32 = 10;

#[repr(C)]
pub struct densefs_rs_result {
    pub status: i32,
    /// Output bytes (null when empty or on error); owned by Rust.
    pub data: *mut u8,
    pub len: usize,
    /// NUL-terminated message when status != OK (else null); owned by Rust.
    pub error: *mut c_char,
}

struct Failure {
    status: i32,
    message: String,
}

fn fail<T>(status: i32, message: impl Into<String>) -> Result<T, Failure> {
    Err(Failure {
        status,
        message: message.into(),
    })
}

fn into_result(r: std::thread::Result<Result<Vec<u8>, Failure>>) -> densefs_rs_result {
    let (status, data, message) = match r {
        Ok(Ok(v)) => (DENSEFS_RS_OK, v, None),
        Ok(Err(f)) => (f.status, Vec::new(), Some(f.message)),
        Err(payload) => {
            let what = if let Some(s) = payload.downcast_ref::<&str>() {
                (*s).to_string()
            } else if let Some(s) = payload.downcast_ref::<String>() {
                s.clone()
            } else {
                "unknown panic".to_string()
            };
            (
                DENSEFS_RS_PANIC,
                Vec::new(),
                Some(format!("panic in Rust codec: {what}")),
            )
        }
    };
    let error = match message {
        Some(m) => {
            CString::new(m.replace('\0', " ")).map_or(std::ptr::null_mut(), CString::into_raw)
        }
        None => std::ptr::null_mut(),
    };
    let len = data.len();
    let data = if len == 0 {
        std::ptr::null_mut()
    } else {
        Box::into_raw(data.into_boxed_slice()) as *mut u8
    };
    densefs_rs_result {
        status,
        data,
        len,
        error,
    }
}

/// Runs `f` so that no panic crosses the C ABI.
fn guarded(f: impl FnOnce() -> Result<Vec<u8>, Failure>) -> densefs_rs_result {
    // A caught panic is reported in the result (DENSEFS_RS_PANIC with its
    // message, logged once by densefs); the default hook would also print
    // it to stderr, with a backtrace under RUST_BACKTRACE, for every corrupt
    // chunk preflate-rs or lepton_jpeg panics on. Every Rust call of the
    // process comes through here.
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| std::panic::set_hook(Box::new(|_| {})));
    into_result(catch_unwind(AssertUnwindSafe(f)))
}

/// # Safety
/// `ptr` must be null or point to `len` readable bytes that outlive the call.
unsafe fn input<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return fail(
            DENSEFS_RS_BAD_ARGUMENT,
            "null input pointer with a non-zero length",
        );
    }
    // SAFETY: the caller guarantees `len` readable bytes at `ptr`.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Releases what a `densefs_rs_*` call returned; resets the fields. Safe to
/// call twice and on a zeroed struct.
///
/// # Safety
/// `r` must be null or a result returned by this library and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn densefs_rs_free(r: *mut densefs_rs_result) {
    if r.is_null() {
        return;
    }
    // SAFETY: per the contract, `r` points to a live result of ours.
    let r = unsafe { &mut *r };
    if !r.data.is_null() {
        // SAFETY: `data`/`len` came from Box<[u8]>::into_raw in into_result.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(r.data, r.len)) });
    }
    if !r.error.is_null() {
        // SAFETY: `error` came from CString::into_raw in into_result.
        drop(unsafe { CString::from_raw(r.error) });
    }
    r.data = std::ptr::null_mut();
    r.len = 0;
    r.error = std::ptr::null_mut();
}

// ---------------------------------------------------------------- Lepton

/// The same features for encoding and decoding: densefs is the only writer
/// of its Lepton payloads, and the decoder must accept exactly what the
/// encoder produced (SIMD-compatible 16-bit estimates, as lepton_jpeg writes).
fn lepton_features(threads: u32, max_file_size: usize) -> EnabledFeatures {
    let mut f = EnabledFeatures::compat_lepton_vector_write();
    f.max_jpeg_width = LEPTON_MAX_SIDE;
    f.max_jpeg_height = LEPTON_MAX_SIDE;
    f.max_processor_threads = threads.max(1);
    f.max_jpeg_file_size = u32::try_from(max_file_size).unwrap_or(u32::MAX);
    f
}

/// Whether every size a Lepton file's compressed header declares fits in
/// that header. lepton_jpeg 0.5.8 allocates and zeroes each of them (the raw
/// JPEG header "HDR", restart errors "FRS", trailing garbage "GRB") at a u32
/// read from the file, before reading the bytes: a 300-byte file could make
/// it take 4 GiB and seconds (found by tests/fuzz, codec_decode_lepton).
/// Layout (lepton_jpeg's lepton_header.rs): a 28-byte fixed header with the
/// compressed header's size at 24..28, then that many bytes of zlib data
/// holding "HDR" u32 n + n bytes, then markers. The inflated header is at
/// most the output plus 1 MiB of recovery data, or the file is corrupt.
/// What this walk cannot read is left to lepton_jpeg to reject.
fn lepton_header_fits(lep: &[u8], max_out: usize) -> bool {
    const FIXED_HEADER_SIZE: usize = 28;
    if lep.len() < FIXED_HEADER_SIZE {
        return true;
    }
    let compressed_size = u32::from_le_bytes([lep[24], lep[25], lep[26], lep[27]]) as usize;
    let end = FIXED_HEADER_SIZE
        .saturating_add(compressed_size)
        .min(lep.len());
    let cap = max_out.saturating_add(1 << 20);
    let mut header = Vec::new();
    let inflated = flate2::read::ZlibDecoder::new(&lep[FIXED_HEADER_SIZE..end])
        .take(cap as u64 + 1)
        .read_to_end(&mut header);
    if inflated.is_ok() && header.len() > cap {
        return false;
    }
    // A zlib error: lepton_jpeg meets it too, after the bytes read so far.
    let mut rest = &header[..];
    let u32_at = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
    // Skips `n` declared bytes; false when the header does not hold them.
    let skip = |rest: &mut &[u8], n: usize| -> bool {
        if n > rest.len() {
            return false;
        }
        *rest = &rest[n..];
        true
    };
    if rest.len() < 7 || &rest[..3] != b"HDR" {
        return true;
    }
    let n = u32_at(&rest[3..7]);
    rest = &rest[7..];
    if !skip(&mut rest, n) {
        return false;
    }
    while rest.len() >= 3 {
        let marker = [rest[0], rest[1], rest[2]];
        rest = &rest[3..];
        let sized = |rest: &mut &[u8], unit: usize| -> Option<bool> {
            if rest.len() < 4 {
                return None;
            }
            let n = u32_at(rest).saturating_mul(unit);
            *rest = &rest[4..];
            Some(skip(rest, n))
        };
        let ok = match &marker {
            b"P0D" => skip(&mut rest, 1),
            b"CRS" => match sized(&mut rest, 4) {
                Some(ok) => ok,
                None => return true,
            },
            b"FRS" | b"GRB" => match sized(&mut rest, 1) {
                Some(ok) => ok,
                None => return true,
            },
            // Thread handoffs: 16 bytes each, their count in the marker.
            [b'H', b'H', k] => skip(&mut rest, 16 * usize::from(*k)),
            b"EEE" => skip(&mut rest, 28),
            _ => return true, // unknown: lepton_jpeg rejects it
        };
        if !ok {
            return false;
        }
    }
    true
}

fn with_lepton_pool<T>(threads: u32, f: impl FnOnce(&dyn LeptonThreadPool) -> T) -> T {
    if threads <= 1 {
        // Runs everything on the calling thread: densefs parallelises across
        // chunks, so by default one chunk is one thread.
        f(&SingleThreadPool::default())
    } else {
        f(&DEFAULT_THREAD_POOL)
    }
}

/// Encoding failures are rejections (the JPEG is one lepton_jpeg does not
/// take: the caller falls back); decoding failures are corruption.
fn lepton_failure(e: lepton_jpeg::LeptonError, decoding: bool) -> Failure {
    let status = if decoding {
        DENSEFS_RS_CORRUPT
    } else {
        DENSEFS_RS_REJECTED
    };
    Failure {
        status,
        message: format!(
            "lepton: {:?}: {}",
            e.exit_code(),
            e.message().lines().next().unwrap_or("")
        ),
    }
}

/// A Vec writer that refuses to grow past `max`.
struct BoundedWriter {
    buf: Vec<u8>,
    max: usize,
    overflowed: bool,
}

impl Write for BoundedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if data.len() > self.max - self.buf.len() {
            self.overflowed = true;
            return Err(std::io::Error::other("output exceeds the allowed size"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Encodes one JPEG into a Lepton file. Does not verify: the caller decodes
/// and compares (lepton_jpeg can produce a file that decodes to different
/// bytes without an error).
///
/// # Safety
/// `jpeg` must point to `len` readable bytes (or be null with len 0).
#[no_mangle]
pub unsafe extern "C" fn densefs_rs_lepton_encode(
    jpeg: *const u8,
    len: usize,
    threads: u32,
) -> densefs_rs_result {
    guarded(|| {
        // SAFETY: forwarded caller contract.
        let jpeg = unsafe { input(jpeg, len) }?;
        let features = lepton_features(threads, jpeg.len());
        let mut out = Vec::with_capacity(jpeg.len());
        with_lepton_pool(threads, |pool| {
            lepton_jpeg::encode_lepton(
                &mut Cursor::new(jpeg),
                &mut Cursor::new(&mut out),
                &features,
                pool,
            )
        })
        .map_err(|e| lepton_failure(e, false))?;
        Ok(out)
    })
}

/// Decodes a Lepton file into at most `max_out` bytes.
///
/// # Safety
/// `lep` must point to `len` readable bytes (or be null with len 0).
#[no_mangle]
pub unsafe extern "C" fn densefs_rs_lepton_decode(
    lep: *const u8,
    len: usize,
    max_out: usize,
    threads: u32,
) -> densefs_rs_result {
    guarded(|| {
        // SAFETY: forwarded caller contract.
        let lep = unsafe { input(lep, len) }?;
        if !lepton_header_fits(lep, max_out) {
            return fail(
                DENSEFS_RS_CORRUPT,
                format!("lepton: the JPEG header claims more than {max_out} bytes"),
            );
        }
        let features = lepton_features(threads, max_out);
        let mut out = BoundedWriter {
            buf: Vec::new(),
            max: max_out,
            overflowed: false,
        };
        let r = with_lepton_pool(threads, |pool| {
            lepton_jpeg::decode_lepton(&mut Cursor::new(lep), &mut out, &features, pool)
        });
        if out.overflowed {
            return fail(
                DENSEFS_RS_TOO_LARGE,
                format!("lepton: decodes to more than {max_out} bytes"),
            );
        }
        r.map_err(|e| lepton_failure(e, true))?;
        Ok(out.buf)
    })
}

// -------------------------------------------------------------- Broccoli

/// The window (log2) a brotli stream declares in its first bits (RFC 7932
/// section 9.1); None for large-window streams or a short input.
fn brotli_window_bits(stream: &[u8]) -> Option<i32> {
    let b = *stream.first()?;
    if b & 1 == 0 {
        return Some(16);
    }
    let n = (b >> 1) & 7;
    if n != 0 {
        return Some(17 + i32::from(n));
    }
    match (b >> 4) & 7 {
        0 => Some(17),
        1 => None, // large window (not RFC 7932)
        m => Some(8 + i32::from(m)),
    }
}

/// True when `stream` starts like a stream of densefs_rs_broccoli_compress:
/// the window bits, then a metadata block holding the catable magic number
/// (0xe1 0x97 0x81). Streams without it may use the static dictionary or end
/// with a last-block marker, and cannot be joined.
fn is_catable_broccoli(stream: &[u8]) -> bool {
    let Some(&b) = stream.first() else {
        return false;
    };
    let window_header_bits = if b & 1 == 0 {
        1
    } else if (b >> 1) & 7 != 0 {
        4
    } else {
        7
    };
    // ISLAST, MNIBBLES, reserved, MSKIPBYTES, MSKIPLEN: 14 bits, then the
    // metadata starts at the next byte boundary.
    let start = (window_header_bits + 14 + 7) / 8;
    stream.get(start..start + 3) == Some(&[0xe1, 0x97, 0x81][..])
}

/// The window a stream of `len` bytes is encoded with: the configured one,
/// or less when a smaller window already reaches every byte of the input
/// ((1 << w) - 16 >= len, RFC 7932 section 9.1), so no match is lost and the
/// bytes come out the same. The encoder allocates and clears its ring buffer
/// at the window's size: for a 3 KiB file at window 22 that was half of its
/// time (tests/bench/codec_bench.cpp `small`: 2,000 files of /usr/share/doc
/// under 64 KiB, 642 us per file at 22, 308 at 17, identical output). Never
/// below 17: at 16 and less the crate picks another hasher that was 30x
/// slower on the same files, and joining a 16-bit stream needs a workaround
/// (densefs_rs_broccoli_concat).
fn window_for(len: usize, configured: i32) -> i32 {
    let mut w = BROTLI_SMALL_INPUT_MIN_LGWIN;
    while w < configured && (1usize << w) - 16 < len {
        w += 1;
    }
    w.min(configured)
}
const BROTLI_SMALL_INPUT_MIN_LGWIN: i32 = 17;

/// Compresses `len` bytes into one catable, appendable Broccoli stream with
/// the magic-number header: any number of such streams join with
/// densefs_rs_broccoli_concat, and each one alone is a valid brotli stream.
///
/// # Safety
/// `plain` must point to `len` readable bytes (or be null with len 0).
#[no_mangle]
pub unsafe extern "C" fn densefs_rs_broccoli_compress(
    plain: *const u8,
    len: usize,
    quality: i32,
    lgwin: i32,
) -> densefs_rs_result {
    guarded(|| {
        // SAFETY: forwarded caller contract.
        let plain = unsafe { input(plain, len) }?;
        if !(0..=11).contains(&quality) {
            return fail(
                DENSEFS_RS_BAD_ARGUMENT,
                format!("broccoli quality {quality} is outside 0..11"),
            );
        }
        if !(BROTLI_MIN_LGWIN..=BROTLI_MAX_LGWIN).contains(&lgwin) {
            return fail(
                DENSEFS_RS_BAD_ARGUMENT,
                format!("broccoli window {lgwin} is outside 10..24"),
            );
        }
        let params = BrotliEncoderParams {
            quality,
            lgwin: window_for(plain.len(), lgwin),
            size_hint: plain.len(),
            catable: true,
            appendable: true,
            magic_number: true,
            use_dictionary: false, // catable streams cannot use it (the encoder forces this too)
            ..BrotliEncoderParams::default()
        };
        let mut out = Vec::with_capacity(plain.len() / 2 + 64);
        brotli::BrotliCompress(&mut Cursor::new(plain), &mut out, &params).map_err(|e| {
            Failure {
                status: DENSEFS_RS_CORRUPT,
                message: format!("broccoli: compression failed: {e}"),
            }
        })?;
        Ok(out)
    })
}

/// Decodes one brotli stream (Broccoli or plain) into at most `max_out`
/// bytes. The input must hold exactly one stream: truncation, trailing
/// bytes and large-window streams are errors.
///
/// # Safety
/// `stored` must point to `len` readable bytes (or be null with len 0).
#[no_mangle]
pub unsafe extern "C" fn densefs_rs_broccoli_decompress(
    stored: *const u8,
    len: usize,
    max_out: usize,
) -> densefs_rs_result {
    guarded(|| {
        // SAFETY: forwarded caller contract.
        let stored = unsafe { input(stored, len) }?;
        match brotli_window_bits(stored) {
            None if stored.is_empty() => return fail(DENSEFS_RS_CORRUPT, "broccoli: empty stream"),
            None => {
                return fail(
                    DENSEFS_RS_CORRUPT,
                    "broccoli: large-window streams are not accepted",
                )
            }
            Some(_) => {}
        }
        // new_strict: RFC 7932 windows only, so at most a 16 MiB ring buffer.
        let mut state = BrotliState::new_strict(
            HeapAlloc::<u8>::new(0),
            HeapAlloc::<u32>::new(0),
            HeapAlloc::<HuffmanCode>::new(HuffmanCode::default()),
        );
        let mut out: Vec<u8> = Vec::new();
        let mut scratch = vec![0u8; (max_out.saturating_add(1)).clamp(1, 256 << 10)];
        let mut in_offset = 0usize;
        let mut total_out = 0usize;
        loop {
            let mut avail_in = stored.len() - in_offset;
            let mut avail_out = scratch.len();
            let mut out_offset = 0usize;
            let r = BrotliDecompressStream(
                &mut avail_in,
                &mut in_offset,
                stored,
                &mut avail_out,
                &mut out_offset,
                &mut scratch,
                &mut total_out,
                &mut state,
            );
            if out_offset > max_out - out.len() {
                return fail(
                    DENSEFS_RS_TOO_LARGE,
                    format!("broccoli: decodes to more than {max_out} bytes"),
                );
            }
            out.extend_from_slice(&scratch[..out_offset]);
            match r {
                BrotliResult::ResultSuccess => {
                    if in_offset != stored.len() {
                        return fail(
                            DENSEFS_RS_CORRUPT,
                            format!(
                                "broccoli: {} bytes after the end of the stream",
                                stored.len() - in_offset
                            ),
                        );
                    }
                    return Ok(out);
                }
                BrotliResult::NeedsMoreOutput => continue,
                BrotliResult::NeedsMoreInput => {
                    return fail(DENSEFS_RS_CORRUPT, "broccoli: stream is truncated")
                }
                BrotliResult::ResultFailure => {
                    return fail(DENSEFS_RS_CORRUPT, "broccoli: corrupt stream")
                }
            }
        }
    })
}

/// Joins `n` complete Broccoli streams into one brotli stream that decodes
/// to the concatenation of their contents. No recompression.
///
/// # Safety
/// `pieces` and `lens` must each point to `n` elements; each piece to its
/// length in readable bytes (a piece may be null when its length is 0).
#[no_mangle]
pub unsafe extern "C" fn densefs_rs_broccoli_concat(
    pieces: *const *const u8,
    lens: *const usize,
    n: usize,
) -> densefs_rs_result {
    guarded(|| {
        if n > 0 && (pieces.is_null() || lens.is_null()) {
            return fail(DENSEFS_RS_BAD_ARGUMENT, "null piece array");
        }
        let mut slices = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: the caller guarantees n elements in each array and
            // lens[i] readable bytes at pieces[i].
            let (p, l) = unsafe { (*pieces.add(i), *lens.add(i)) };
            slices.push(unsafe { input(p, l) }?);
        }
        // Every piece must fit the window the joined stream declares: use
        // the largest one.
        let mut lgwin = BROTLI_MIN_LGWIN;
        for (i, s) in slices.iter().enumerate() {
            match brotli_window_bits(s) {
                Some(w) if is_catable_broccoli(s) => lgwin = lgwin.max(w),
                _ => {
                    return fail(
                        DENSEFS_RS_CORRUPT,
                        format!("broccoli concat: piece {i} is not a catable Broccoli stream"),
                    )
                }
            }
        }
        // brotli 8.0.4's BroCatli writes a wrong stream header for a 16-bit
        // window (0b111, which declares 20 bits and leaves ISLAST/ISEMPTY
        // misplaced), so every joined stream was corrupt. Declaring 17 bits
        // is valid for 16-bit pieces: catable streams never reference the
        // static dictionary, so a larger window changes no distance.
        // Found by tests/fuzz (codec_roundtrip_broccoli).
        if lgwin == 16 {
            lgwin = 17;
        }
        let mut cat = BroCatli::new_with_window_size(lgwin as u8);
        let total: usize = slices.iter().map(|s| s.len()).sum();
        let mut out = vec![0u8; total + 64];
        let mut out_offset = 0usize;
        for (i, s) in slices.iter().enumerate() {
            cat.new_brotli_file();
            let mut in_offset = 0usize;
            loop {
                match cat.stream(s, &mut in_offset, &mut out, &mut out_offset) {
                    BroCatliResult::NeedsMoreInput => break,
                    BroCatliResult::NeedsMoreOutput => {
                        let grow = out.len().max(64);
                        out.resize(out.len() + grow, 0);
                    }
                    other => {
                        return fail(
                            DENSEFS_RS_CORRUPT,
                            format!("broccoli concat: piece {i} cannot be joined ({other:?})"),
                        )
                    }
                }
            }
        }
        loop {
            match cat.finish(&mut out, &mut out_offset) {
                BroCatliResult::Success => break,
                BroCatliResult::NeedsMoreOutput => {
                    let grow = out.len().max(64);
                    out.resize(out.len() + grow, 0);
                }
                other => {
                    return fail(
                        DENSEFS_RS_CORRUPT,
                        format!("broccoli concat: cannot finish ({other:?})"),
                    )
                }
            }
        }
        out.truncate(out_offset);
        Ok(out)
    })
}

// --------------------------------------------------------------- Deflate

/// Kept bytes of the container (gzip header, trailer, padding), copied to
/// the output as they are.
const OP_LITERAL: u8 = b'L';
/// A deflate stream rebuilt by preflate from the next bytes of the plain text
/// and its reconstruction data.
const OP_DEFLATE: u8 = b'D';
/// PNG: the bytes the following ops write are the data of this many IDAT
/// chunks (each with its length and kept CRC), framed as chunks once all
/// are written.
const OP_IDAT: u8 = b'I';

/// A deflate stream whose plain text is itself a container (a PNG member
/// of a zip, deflated): the ops of its own skeleton, rebuilt from the next
/// plain text, give the stream's plain text, which preflate then deflates.
/// One level deep: the inner skeleton has no OP_NESTED.
const OP_NESTED: u8 = b'N';

const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
const JPEG_SOI: &[u8] = b"\xff\xd8\xff";

/// What a range of the plain text holds. The C++ side (deflate_codec.cpp)
/// codes each kind with the coder that suits it; the kind is a hint, the
/// bytes are the same either way.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum PlainKind {
    Text,
    /// The filtered scanlines of a non-interlaced PNG image, exactly.
    PngRows {
        width: u32,
        height: u32,
        depth: u8,
        color: u8,
    },
    /// A whole JPEG file (a zip member).
    Jpeg,
}

/// A container split into its skeleton (the ops that rebuild it), its plain
/// text, and the kind of each range of that plain text, in order.
#[derive(Default)]
struct Split {
    skeleton: Vec<u8>,
    plain: Vec<u8>,
    segments: Vec<(PlainKind, usize)>,
    /// The skeleton has an OP_NESTED (a payload format 1 cannot hold).
    nested: bool,
}

impl Split {
    fn push_plain(&mut self, kind: PlainKind, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        match self.segments.last_mut() {
            Some((PlainKind::Text, len)) if kind == PlainKind::Text => *len += bytes.len(),
            _ => self.segments.push((kind, bytes.len())),
        }
        self.plain.extend_from_slice(bytes);
    }

    /// Kept bytes of the container.
    fn literal(&mut self, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.skeleton.push(OP_LITERAL);
            put_varint(&mut self.skeleton, bytes.len() as u64);
            self.skeleton.extend_from_slice(bytes);
        }
    }

    fn deflate(&mut self, plain: &[u8], corrections: &[u8], kind: PlainKind) {
        self.skeleton.push(OP_DEFLATE);
        put_varint(&mut self.skeleton, plain.len() as u64);
        put_varint(&mut self.skeleton, corrections.len() as u64);
        self.skeleton.extend_from_slice(corrections);
        self.push_plain(kind, plain);
    }

    /// A deflate stream of `plain_len` bytes of plain text that `inner`
    /// rebuilds.
    fn deflate_nested(&mut self, plain_len: usize, corrections: &[u8], inner: Split) {
        self.nested = true;
        self.skeleton.push(OP_NESTED);
        put_varint(&mut self.skeleton, plain_len as u64);
        put_varint(&mut self.skeleton, corrections.len() as u64);
        self.skeleton.extend_from_slice(corrections);
        put_varint(&mut self.skeleton, inner.skeleton.len() as u64);
        self.skeleton.extend_from_slice(&inner.skeleton);
        self.append_plain(inner);
    }

    /// `inner`'s ops written here, in place (a stored member).
    fn append(&mut self, inner: Split) {
        self.nested |= inner.nested;
        self.skeleton.extend_from_slice(&inner.skeleton);
        self.append_plain(inner);
    }

    fn append_plain(&mut self, inner: Split) {
        let mut at = 0;
        for (kind, len) in inner.segments {
            self.push_plain(kind, &inner.plain[at..at + len]);
            at += len;
        }
    }

    /// The segment table: a flags byte (1: the skeleton has OP_NESTED), a
    /// varint count, then per segment its kind (0 text, 1 PNG rows, 2 JPEG)
    /// and plain length; PNG rows add width, height (varints), bit depth
    /// and colour type (a byte each).
    fn segment_table(&self) -> Vec<u8> {
        let mut t = vec![u8::from(self.nested)];
        put_varint(&mut t, self.segments.len() as u64);
        for &(kind, len) in &self.segments {
            match kind {
                PlainKind::Text => t.push(0),
                PlainKind::PngRows { .. } => t.push(1),
                PlainKind::Jpeg => t.push(2),
            }
            put_varint(&mut t, len as u64);
            if let PlainKind::PngRows {
                width,
                height,
                depth,
                color,
            } = kind
            {
                put_varint(&mut t, u64::from(width));
                put_varint(&mut t, u64::from(height));
                t.push(depth);
                t.push(color);
            }
        }
        t
    }
}

/// A deflate stream (or all the streams of one chunk together) may inflate
/// to at most this many bytes: 64 times the container, at least 16 MiB,
/// never more than 64 MiB. It bounds a gzip bomb's cost (inflating stops at
/// the cap, then the chunk is refused: ~0.1 s) and preflate's memory, and
/// the plain text a decoder accepts for a chunk of `len` bytes. Text
/// compresses 3-10x; flat images (PNG icons) often 100x, hence the floor.
fn deflate_plain_cap(len: usize) -> usize {
    const MIN: usize = 16 << 20;
    const MAX: usize = 64 << 20;
    len.saturating_mul(64).clamp(MIN, MAX)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(b: &mut &[u8]) -> Result<u64, Failure> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let Some((&byte, rest)) = b.split_first() else {
            return fail(DENSEFS_RS_CORRUPT, "deflate: truncated varint");
        };
        *b = rest;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    fail(DENSEFS_RS_CORRUPT, "deflate: varint longer than 64 bits")
}

fn take<'a>(b: &mut &'a [u8], n: u64, what: &str) -> Result<&'a [u8], Failure> {
    match usize::try_from(n) {
        Ok(n) if n <= b.len() => {
            let (head, rest) = b.split_at(n);
            *b = rest;
            Ok(head)
        }
        _ => fail(
            DENSEFS_RS_CORRUPT,
            format!("deflate: {what} of {n} bytes, only {} left", b.len()),
        ),
    }
}

/// The length of a gzip member header (RFC 1952 section 2.3) at the start
/// of `b`, or None when `b` does not start with one densefs takes (deflate
/// method, no reserved flags, complete).
fn gzip_header_len(b: &[u8]) -> Option<usize> {
    const FHCRC: u8 = 2;
    const FEXTRA: u8 = 4;
    const FNAME: u8 = 8;
    const FCOMMENT: u8 = 16;
    if b.len() < 10 || b[0] != 0x1f || b[1] != 0x8b || b[2] != 8 || b[3] & 0xe0 != 0 {
        return None;
    }
    let flags = b[3];
    let mut at = 10usize;
    if flags & FEXTRA != 0 {
        let xlen = usize::from(u16::from_le_bytes([*b.get(at)?, *b.get(at + 1)?]));
        at = at.checked_add(2 + xlen)?;
    }
    for flag in [FNAME, FCOMMENT] {
        if flags & flag != 0 {
            at += b.get(at..)?.iter().position(|&c| c == 0)? + 1;
        }
    }
    if flags & FHCRC != 0 {
        at += 2;
    }
    (at <= b.len()).then_some(at)
}

/// Runs preflate on the deflate stream at the start of `data`: returns the
/// stream's length, its plain text and the reconstruction data. Refuses a
/// stream that does not end (truncated), inflates past `plain_cap`, or that
/// preflate cannot rebuild.
fn preflate_stream(data: &[u8], plain_cap: usize) -> Result<(usize, Vec<u8>, Vec<u8>), Failure> {
    let config = preflate_rs::PreflateConfig {
        // Verification happens end to end: the caller decodes the whole
        // payload and compares it with the input (encode_chunk).
        verify_compression: false,
        plain_text_limit: plain_cap,
        ..preflate_rs::PreflateConfig::default()
    };
    let mut processor = preflate_rs::PreflateStreamProcessor::new(&config);
    let r = processor.decompress(data).map_err(|e| Failure {
        status: DENSEFS_RS_REJECTED,
        message: if e.exit_code() == preflate_rs::ExitCode::PlainTextLimit {
            format!("deflate: stream refused: it inflates to more than {plain_cap} bytes (the cap for this chunk)")
        } else {
            format!(
                "deflate: preflate refused the stream: {:?}: {}",
                e.exit_code(),
                e.message().lines().next().unwrap_or("")
            )
        },
    })?;
    if !processor.is_done() {
        // preflate stops early, without an error, at the plain text limit or
        // at a truncated block.
        let plain = processor.plain_text().len();
        let why = if plain >= plain_cap / 2 {
            format!("it inflates to more than {plain_cap} bytes (the cap for this chunk)")
        } else {
            "it is truncated".to_string()
        };
        return fail(
            DENSEFS_RS_REJECTED,
            format!("deflate: stream refused: {why}"),
        );
    }
    let plain = processor.detach_plain_text().text().to_vec();
    Ok((r.compressed_size, plain, r.corrections))
}

/// Splits a gzip file (one or more members, then optional trailing bytes)
/// into the skeleton (ops) and the concatenated plain text of its members.
fn split_gzip(input: &[u8], plain_cap: usize) -> Result<Split, Failure> {
    let mut split = Split::default();
    let mut rest = input;
    let mut members = 0usize;
    while let Some(header) = gzip_header_len(rest) {
        let (deflate_len, member_plain, corrections) =
            preflate_stream(&rest[header..], plain_cap - split.plain.len()).map_err(|mut f| {
                f.message = format!("{} (gzip member {members})", f.message);
                f
            })?;
        let member_end = header + deflate_len + 8;
        if member_end > rest.len() {
            return fail(
                DENSEFS_RS_REJECTED,
                format!("deflate: gzip member {members} has no complete trailer"),
            );
        }
        split.literal(&rest[..header]);
        split.deflate(&member_plain, &corrections, PlainKind::Text);
        split.literal(&rest[header + deflate_len..member_end]);
        rest = &rest[member_end..];
        members += 1;
    }
    if members == 0 {
        return fail(DENSEFS_RS_REJECTED, "deflate: not a gzip file");
    }
    // Zero padding (tape blocks) or other bytes after the last member.
    split.literal(rest);
    Ok(split)
}

fn be32(b: &[u8]) -> usize {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize
}

/// The image header of a PNG (its IHDR chunk, which must come first) when
/// its IDAT stream inflates to the plain filtered scanlines the C++ side
/// can turn into pixels: not interlaced, a valid depth for its colour type.
fn png_rows_kind(input: &[u8]) -> Option<(PlainKind, usize)> {
    let h = input.get(8..8 + 8 + 13)?;
    if be32(h) != 13 || &h[4..8] != b"IHDR" {
        return None;
    }
    let (width, height) = (be32(&h[8..]), be32(&h[12..]));
    let (depth, color) = (h[16], h[17]);
    let (compression, filter, interlace) = (h[18], h[19], h[20]);
    let channels = match (color, depth) {
        (0, 1 | 2 | 4 | 8 | 16) | (3, 1 | 2 | 4 | 8) => 1,
        (2, 8 | 16) => 3,
        (4, 8 | 16) => 2,
        (6, 8 | 16) => 4,
        _ => return None,
    };
    if compression != 0 || filter != 0 || interlace != 0 || width == 0 || height == 0 {
        return None;
    }
    let row_bits = width.checked_mul(channels * usize::from(depth))?;
    let rows_len = height.checked_mul(1 + row_bits.div_ceil(8))?;
    let kind = PlainKind::PngRows {
        width: u32::try_from(width).ok()?,
        height: u32::try_from(height).ok()?,
        depth,
        color,
    };
    Some((kind, rows_len))
}

/// Splits a PNG file: its IDAT chunks hold one zlib stream; everything else
/// (other chunks, the IDAT lengths and CRCs, the zlib header and Adler-32)
/// is kept. Forged lengths, IDAT chunks that are not consecutive, a zlib
/// header preflate cannot take: refused. The plain text is marked as PNG
/// rows when it is exactly the image's filtered scanlines.
fn split_png(input: &[u8], plain_cap: usize) -> Result<Split, Failure> {
    let refuse = |why: &str| fail(DENSEFS_RS_REJECTED, format!("deflate: PNG refused: {why}"));
    if !input.starts_with(PNG_SIGNATURE) {
        return refuse("no PNG signature");
    }
    // (offset of the chunk, data length, CRC) of every IDAT chunk.
    let mut idats: Vec<(usize, usize, [u8; 4])> = Vec::new();
    let mut at = PNG_SIGNATURE.len();
    let mut idat_done = false;
    while at < input.len() {
        if input.len() - at < 12 {
            return refuse("a chunk header past the end");
        }
        let len = be32(&input[at..]);
        if len > input.len() - at - 12 {
            return refuse("a chunk length past the end of the file");
        }
        let kind = &input[at + 4..at + 8];
        let crc_at = at + 8 + len;
        if kind == b"IDAT" {
            if idat_done {
                return refuse("IDAT chunks that are not consecutive");
            }
            let crc = [
                input[crc_at],
                input[crc_at + 1],
                input[crc_at + 2],
                input[crc_at + 3],
            ];
            idats.push((at, len, crc));
        } else if !idats.is_empty() {
            idat_done = true;
        }
        at = crc_at + 4;
        if kind == b"IEND" {
            break;
        }
    }
    if idats.is_empty() {
        return refuse("no IDAT chunk");
    }
    let mut zlib = Vec::new();
    for &(off, len, _) in &idats {
        zlib.extend_from_slice(&input[off + 8..off + 8 + len]);
    }
    // zlib header (RFC 1950): deflate, a window of at most 32 KiB, no
    // preset dictionary, a valid check.
    if zlib.len() < 2
        || zlib[0] & 0x0f != 8
        || zlib[0] >> 4 > 7
        || zlib[1] & 0x20 != 0
        || (u16::from(zlib[0]) << 8 | u16::from(zlib[1])) % 31 != 0
    {
        return refuse("not a zlib stream");
    }
    let (deflate_len, plain, corrections) = preflate_stream(&zlib[2..], plain_cap)?;
    let kind = match png_rows_kind(input) {
        Some((kind, rows_len)) if rows_len == plain.len() => kind,
        _ => PlainKind::Text,
    };
    let first = idats[0].0;
    let (last_off, last_len, _) = *idats.last().unwrap();
    let after = last_off + 12 + last_len;
    let mut split = Split::default();
    split.literal(&input[..first]);
    split.skeleton.push(OP_IDAT);
    put_varint(&mut split.skeleton, idats.len() as u64);
    for &(_, len, crc) in &idats {
        put_varint(&mut split.skeleton, len as u64);
        split.skeleton.extend_from_slice(&crc);
    }
    split.literal(&zlib[..2]);
    split.deflate(&plain, &corrections, kind);
    // The Adler-32 and anything after the stream inside the IDAT data.
    split.literal(&zlib[2 + deflate_len..]);
    // Chunks after the IDATs, IEND, and bytes after IEND.
    split.literal(&input[after..]);
    Ok(split)
}

fn le16(b: &[u8]) -> usize {
    usize::from(u16::from_le_bytes([b[0], b[1]]))
}

fn le32(b: &[u8]) -> usize {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
}

/// At most this many zip entries are recompressed; the rest of the file is
/// kept as it is. Each entry is one preflate call (~1 ms for a tiny one on
/// the 2-core VM), so this bounds one chunk's work to a few seconds.
const ZIP_MAX_ENTRIES: usize = 4096;

/// Splits a zip file (docx, odt, jar, whl, ...): the deflate data of each
/// entry (local header method 8) is recompressed, everything else (local
/// headers, stored entries, data descriptors, the central directory) kept.
/// A member that is a picture gets its own kind of plain text: a deflated
/// PNG member is split again inside its stream (OP_NESTED), a stored one in
/// place; a JPEG member's plain text is marked as JPEG. An entry preflate
/// refuses stays as it is; a file with no entry taken is refused. Entries
/// are walked from the start through their local headers; where a length
/// cannot be known (a data descriptor after an entry that is not taken),
/// the rest of the file is kept as it is.
fn split_zip(input: &[u8], plain_cap: usize) -> Result<Split, Failure> {
    let mut split = Split::default();
    let mut kept_from = 0usize; // start of the bytes not yet in the skeleton
    let mut at = 0usize;
    let mut streams = 0usize;
    let mut entries = 0usize;
    while entries < ZIP_MAX_ENTRIES
        && input.len() - at >= 30
        && input[at..].starts_with(b"PK\x03\x04")
    {
        entries += 1;
        let h = &input[at..];
        let flags = le16(&h[6..]);
        let method = le16(&h[8..]);
        let csize = le32(&h[18..]);
        let data = 30 + le16(&h[26..]) + le16(&h[28..]);
        if data > h.len() {
            break;
        }
        let descriptor = flags & 8 != 0;
        let mut end: Option<usize> = None; // offset in h after the entry's data
        if method == 8 {
            if let Ok((dlen, p, corrections)) =
                preflate_stream(&h[data..], plain_cap - split.plain.len())
            {
                split.literal(&input[kept_from..at + data]);
                let nested = p
                    .starts_with(PNG_SIGNATURE)
                    .then(|| split_png(&p, plain_cap - split.plain.len()).ok())
                    .flatten();
                match nested {
                    Some(png) => split.deflate_nested(p.len(), &corrections, png),
                    None => {
                        let kind = if p.starts_with(JPEG_SOI) {
                            PlainKind::Jpeg
                        } else {
                            PlainKind::Text
                        };
                        split.deflate(&p, &corrections, kind);
                    }
                }
                kept_from = at + data + dlen;
                streams += 1;
                end = Some(if descriptor || csize < dlen {
                    data + dlen
                } else {
                    data + csize
                });
            }
        } else if method == 0 && !descriptor && csize <= h.len() - data {
            // A stored PNG: split in place, its ops written where its bytes were.
            let member = &h[data..data + csize];
            if member.starts_with(PNG_SIGNATURE) {
                if let Ok(png) = split_png(member, plain_cap - split.plain.len()) {
                    split.literal(&input[kept_from..at + data]);
                    split.append(png);
                    kept_from = at + data + csize;
                    streams += 1;
                }
            }
        }
        let end = match end {
            Some(e) => e,
            None if !descriptor && csize != 0xffff_ffff => data + csize,
            None => break, // the entry's length is unknown: keep the rest
        };
        if end > h.len() {
            break;
        }
        at += end;
        if descriptor {
            // Optional signature, CRC-32, sizes (zip64 ones are not told
            // apart: then the walk just stops at the next non-header).
            let d = if input[at..].starts_with(b"PK\x07\x08") {
                16
            } else {
                12
            };
            at = (at + d).min(input.len());
        }
    }
    if streams == 0 {
        return fail(
            DENSEFS_RS_REJECTED,
            "deflate: zip refused: no deflate entry preflate takes",
        );
    }
    split.literal(&input[kept_from..]);
    Ok(split)
}

/// Rebuilds the container from its skeleton and plain text, refusing to
/// produce more than `max_out` bytes or to leave plain text unused.
fn join_deflate(skeleton: &[u8], plain: &[u8], max_out: usize) -> Result<Vec<u8>, Failure> {
    let mut plain_rest = plain;
    let allowance = join_allowance(skeleton.len(), max_out);
    let out = join_ops(skeleton, &mut plain_rest, max_out, allowance, true)?;
    if !plain_rest.is_empty() {
        return fail(
            DENSEFS_RS_CORRUPT,
            format!(
                "deflate: {} bytes of plain text left over",
                plain_rest.len()
            ),
        );
    }
    Ok(out)
}

/// Rebuilds what the ops of `skeleton` write (at most `max_out` bytes),
/// taking plain text from the front of `plain_rest`. `allowance` is the
/// whole payload's join_allowance (a nested join gets the outer one, not
/// one sized by its own output); an OP_NESTED is taken only when
/// `nested_allowed`.
fn join_ops(
    skeleton: &[u8],
    plain_rest: &mut &[u8],
    max_out: usize,
    allowance: usize,
    nested_allowed: bool,
) -> Result<Vec<u8>, Failure> {
    let mut ops = skeleton;
    let mut out: Vec<u8> = Vec::new();
    // An open IDAT region: its chunks (length, CRC), and the bytes written
    // into it so far. Every byte in it ends up in `out` too, with 12 bytes
    // of framing per chunk, so the max_out check covers it.
    let mut region: Option<(Vec<(usize, [u8; 4])>, usize, Vec<u8>)> = None;
    let too_large = || {
        fail::<()>(
            DENSEFS_RS_TOO_LARGE,
            format!("deflate: decodes to more than {max_out} bytes"),
        )
    };
    let mut written = 0usize; // bytes of output so far, framing included
    while let Some((&op, rest)) = ops.split_first() {
        ops = rest;
        let bytes: Vec<u8> = match op {
            OP_LITERAL => {
                let n = get_varint(&mut ops)?;
                take(&mut ops, n, "literal")?.to_vec()
            }
            OP_DEFLATE | OP_NESTED => {
                let n = get_varint(&mut ops)?;
                let c = get_varint(&mut ops)?;
                let corrections = take(&mut ops, c, "reconstruction data")?;
                let nested_plain;
                let stream_plain: &[u8] = if op == OP_DEFLATE {
                    take(plain_rest, n, "plain text")?
                } else {
                    if !nested_allowed {
                        return fail(
                            DENSEFS_RS_CORRUPT,
                            "deflate: a nested stream inside a nested one",
                        );
                    }
                    let cap = deflate_plain_cap(max_out);
                    let n = match usize::try_from(n) {
                        Ok(n) if n <= cap => n,
                        _ => {
                            return fail(
                                DENSEFS_RS_CORRUPT,
                                format!("deflate: a nested stream of {n} bytes, more than the {cap} allowed"),
                            )
                        }
                    };
                    let s = get_varint(&mut ops)?;
                    let inner = take(&mut ops, s, "nested skeleton")?;
                    nested_plain = join_ops(inner, plain_rest, n, allowance, false)?;
                    if nested_plain.len() != n {
                        return fail(
                            DENSEFS_RS_CORRUPT,
                            format!(
                                "deflate: a nested stream rebuilt to {} bytes, not {n}",
                                nested_plain.len()
                            ),
                        );
                    }
                    &nested_plain
                };
                alloc_budget::refill(
                    allowance
                        .saturating_add(stream_allowance(stream_plain.len(), corrections.len())),
                );
                preflate_rs::recreate_whole_deflate_stream(stream_plain, corrections).map_err(
                    |e| Failure {
                        status: DENSEFS_RS_CORRUPT,
                        message: format!(
                            "deflate: cannot rebuild a stream: {:?}: {}",
                            e.exit_code(),
                            e.message().lines().next().unwrap_or("")
                        ),
                    },
                )?
            }
            OP_IDAT => {
                if region.is_some() {
                    return fail(DENSEFS_RS_CORRUPT, "deflate: nested IDAT region");
                }
                let k = get_varint(&mut ops)?;
                let mut chunks = Vec::new();
                let mut total = 0usize;
                for _ in 0..k {
                    let len = get_varint(&mut ops)?;
                    let crc = take(&mut ops, 4, "IDAT CRC")?;
                    // Each chunk costs 12 bytes of output: a forged count
                    // or length fails here, before anything is allocated.
                    let len = usize::try_from(len).unwrap_or(usize::MAX);
                    total = total.saturating_add(len);
                    written = written.saturating_add(12).saturating_add(len);
                    if written > max_out {
                        too_large()?;
                    }
                    chunks.push((len, [crc[0], crc[1], crc[2], crc[3]]));
                }
                region = Some((chunks, total, Vec::new()));
                continue;
            }
            _ => {
                return fail(
                    DENSEFS_RS_CORRUPT,
                    format!("deflate: unknown op 0x{op:02x}"),
                )
            }
        };
        match &mut region {
            Some((chunks, total, buf)) => {
                if bytes.len() > *total - buf.len() {
                    return fail(
                        DENSEFS_RS_CORRUPT,
                        "deflate: more bytes than the IDAT chunks hold",
                    );
                }
                buf.extend_from_slice(&bytes);
                if buf.len() == *total {
                    let mut at = 0;
                    for (len, crc) in chunks.iter() {
                        out.extend_from_slice(&(*len as u32).to_be_bytes());
                        out.extend_from_slice(b"IDAT");
                        out.extend_from_slice(&buf[at..at + len]);
                        out.extend_from_slice(crc);
                        at += len;
                    }
                    region = None;
                }
            }
            None => {
                written = written.saturating_add(bytes.len());
                if written > max_out {
                    too_large()?;
                }
                out.extend_from_slice(&bytes);
            }
        }
    }
    if region.is_some() {
        return fail(DENSEFS_RS_CORRUPT, "deflate: IDAT chunks left incomplete");
    }
    Ok(out)
}

/// Splits a container of deflate streams (a gzip file, a PNG, a zip file)
/// into its skeleton and plain text. Output: u64 LE skeleton length, the
/// skeleton, u64 LE segment table length, the segment table
/// (Split::segment_table), then the plain text. REJECTED for anything it does not take (not gzip,
/// truncated, inflating past the cap, a stream preflate cannot predict).
///
/// # Safety
/// `data` must point to `len` readable bytes (or be null with len 0).
#[no_mangle]
pub unsafe extern "C" fn densefs_rs_deflate_split(
    data: *const u8,
    len: usize,
) -> densefs_rs_result {
    guarded(|| {
        // SAFETY: forwarded caller contract.
        let data = unsafe { input(data, len) }?;
        let cap = deflate_plain_cap(data.len());
        let split = if data.starts_with(PNG_SIGNATURE) {
            split_png(data, cap)?
        } else if data.starts_with(b"PK\x03\x04") {
            split_zip(data, cap)?
        } else {
            split_gzip(data, cap)?
        };
        let table = split.segment_table();
        let mut out =
            Vec::with_capacity(16 + split.skeleton.len() + table.len() + split.plain.len());
        out.extend_from_slice(&(split.skeleton.len() as u64).to_le_bytes());
        out.extend_from_slice(&split.skeleton);
        out.extend_from_slice(&(table.len() as u64).to_le_bytes());
        out.extend_from_slice(&table);
        out.extend_from_slice(&split.plain);
        Ok(out)
    })
}

/// The most plain text a deflate payload may hold for a chunk of `len`
/// bytes: what densefs_rs_deflate_split accepts. Decoders refuse more before
/// decompressing it.
#[no_mangle]
pub extern "C" fn densefs_rs_deflate_plain_cap(len: usize) -> usize {
    deflate_plain_cap(len)
}

/// Rebuilds the exact container bytes from a skeleton and the plain text,
/// at most `max_out` bytes.
///
/// # Safety
/// `skeleton` and `plain` must point to their lengths in readable bytes (or
/// be null with length 0).
#[no_mangle]
pub unsafe extern "C" fn densefs_rs_deflate_join(
    skeleton: *const u8,
    skeleton_len: usize,
    plain: *const u8,
    plain_len: usize,
    max_out: usize,
) -> densefs_rs_result {
    guarded(|| {
        // SAFETY: forwarded caller contract.
        let skeleton = unsafe { input(skeleton, skeleton_len) }?;
        let plain = unsafe { input(plain, plain_len) }?;
        if plain.len() > deflate_plain_cap(max_out) {
            return fail(
                DENSEFS_RS_CORRUPT,
                format!(
                    "deflate: {} bytes of plain text for at most {max_out} bytes out",
                    plain.len()
                ),
            );
        }
        join_deflate_bounded(skeleton, plain, max_out)
    })
}

/// What a payload's rebuild may request (alloc_budget.rs; frees are not
/// subtracted). `join_deflate` itself keeps the output and one op's bytes,
/// growing vectors by doubling: `join_allowance`, for the whole call. Each
/// stream's preflate-rs rebuild gets that plus `stream_allowance` afresh
/// (alloc_budget::refill): its predictor tables and token blocks. Measured
/// with examples/deflate_budget.rs on 1,500 man pages, 360 PNGs, 100
/// zip/jar/whl files (up to 1,970 streams) and 50 large gzip files: at most
/// ~550 KB per stream plus 5.2 bytes per plain-text byte. The allowances
/// leave a wide margin, because a real payload that overran one would be
/// refused at read time; what a forged one can make a parked thread keep is
/// bounded by the same figures.
fn join_allowance(skeleton_len: usize, max_out: usize) -> usize {
    skeleton_len
        .saturating_add(max_out)
        .saturating_mul(8)
        .saturating_add(1 << 20)
}

fn stream_allowance(plain_len: usize, corrections_len: usize) -> usize {
    const FIXED: usize = 4 << 20;
    const PER_BYTE: usize = 16;
    plain_len
        .saturating_add(corrections_len)
        .saturating_mul(PER_BYTE)
        .saturating_add(FIXED)
}

/// Runs join_deflate on a budgeted thread (alloc_budget.rs): preflate-rs
/// has no bound of its own on forged reconstruction data.
fn run_join_budgeted(
    skeleton: &[u8],
    plain: &[u8],
    max_out: usize,
) -> Result<alloc_budget::Finished<Result<Vec<u8>, Failure>>, alloc_budget::Refused> {
    let budget = join_allowance(skeleton.len(), max_out);
    // Owned copies: an overrun thread is abandoned, and must not hold
    // borrows of the caller's buffers.
    let (skeleton, plain) = (skeleton.to_vec(), plain.to_vec());
    alloc_budget::run(budget, move || join_deflate(&skeleton, &plain, max_out))
}

fn join_deflate_bounded(skeleton: &[u8], plain: &[u8], max_out: usize) -> Result<Vec<u8>, Failure> {
    match run_join_budgeted(skeleton, plain, max_out) {
        Ok(done) => match done.result {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        },
        Err(alloc_budget::Refused::Overrun) => fail(
            DENSEFS_RS_CORRUPT,
            "deflate: rebuild refused: it asked for more memory than its budget (corrupt reconstruction data)",
        ),
        Err(alloc_budget::Refused::TooManyAbandoned) => fail(
            DENSEFS_RS_CORRUPT,
            "deflate: rebuild refused: earlier corrupt payloads overran their memory budget; remount to decode again",
        ),
        Err(alloc_budget::Refused::Spawn(e)) => fail(
            DENSEFS_RS_CORRUPT,
            format!("deflate: rebuild refused: cannot start its thread: {e}"),
        ),
    }
}

/// Measurement hook (examples/deflate_budget.rs): the bytes one rebuild of
/// a split payload requests under the real budgets; None when it overran
/// them (a real payload must never).
#[doc(hidden)]
pub fn deflate_join_allocated(skeleton: &[u8], plain: &[u8], max_out: usize) -> Option<usize> {
    match run_join_budgeted(skeleton, plain, max_out) {
        Ok(done) if matches!(done.result, Ok(Ok(_))) => Some(done.allocated),
        _ => None,
    }
}

/// Example hook: the skeleton, segment table and plain text of what
/// densefs_rs_deflate_split returned. Panics on a malformed result.
#[doc(hidden)]
pub fn deflate_split_parts(out: &[u8]) -> (&[u8], &[u8], &[u8]) {
    let skel = u64::from_le_bytes(out[..8].try_into().unwrap()) as usize;
    let (skeleton, rest) = out[8..].split_at(skel);
    let table = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
    let (table, plain) = rest[8..].split_at(table);
    (skeleton, table, plain)
}

/// Benchmark hook (examples/deflate_direct.rs): rebuilds every deflate
/// stream of a skeleton with preflate-rs alone, none of densefs' framing or
/// bounds, and returns how many there were. Panics on bad input.
#[doc(hidden)]
pub fn deflate_streams_recreate(skeleton: &[u8], plain: &[u8]) -> usize {
    let mut plain = plain;
    streams_recreate(skeleton, &mut plain)
}

fn streams_recreate(skeleton: &[u8], plain: &mut &[u8]) -> usize {
    let mut ops = skeleton;
    let mut n = 0;
    while let Some((&op, rest)) = ops.split_first() {
        ops = rest;
        let len = get_varint(&mut ops).ok().expect("varint");
        if op == OP_LITERAL {
            ops = &ops[len as usize..];
            continue;
        }
        if op == OP_IDAT {
            for _ in 0..len {
                get_varint(&mut ops).ok().expect("varint");
                ops = &ops[4..];
            }
            continue;
        }
        let c = get_varint(&mut ops).ok().expect("varint") as usize;
        let (corrections, rest) = ops.split_at(c);
        ops = rest;
        let stream_plain = if op == OP_NESTED {
            let s = get_varint(&mut ops).ok().expect("varint") as usize;
            let (inner, rest) = ops.split_at(s);
            ops = rest;
            // The outer stream needs the inner container's bytes: rebuilt
            // with densefs's join (not timed apart from the library's).
            let mut taken = *plain;
            n += streams_recreate(inner, plain);
            let allowance = join_allowance(inner.len(), len as usize);
            join_ops(inner, &mut taken, len as usize, allowance, false)
                .ok()
                .expect("join")
        } else {
            let (p, rest) = plain.split_at(len as usize);
            *plain = rest;
            p.to_vec()
        };
        preflate_rs::recreate_whole_deflate_stream(&stream_plain, corrections).expect("recreate");
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(mut r: densefs_rs_result) -> Result<Vec<u8>, (i32, String)> {
        let out = if r.status == DENSEFS_RS_OK {
            Ok(if r.len == 0 {
                Vec::new()
            } else {
                unsafe { std::slice::from_raw_parts(r.data, r.len) }.to_vec()
            })
        } else {
            Err((
                r.status,
                unsafe { std::ffi::CStr::from_ptr(r.error) }
                    .to_string_lossy()
                    .into_owned(),
            ))
        };
        unsafe { densefs_rs_free(&mut r) };
        out
    }

    #[test]
    fn broccoli_round_trip_and_concat() {
        let a = b"hello hello hello world ".repeat(1000);
        let b = b"another piece of text, another piece ".repeat(500);
        let ca = take(unsafe { densefs_rs_broccoli_compress(a.as_ptr(), a.len(), 5, 22) }).unwrap();
        let cb = take(unsafe { densefs_rs_broccoli_compress(b.as_ptr(), b.len(), 5, 18) }).unwrap();
        assert_eq!(
            take(unsafe { densefs_rs_broccoli_decompress(ca.as_ptr(), ca.len(), a.len()) })
                .unwrap(),
            a
        );
        assert_eq!(
            take(unsafe { densefs_rs_broccoli_decompress(ca.as_ptr(), ca.len(), a.len() - 1) })
                .unwrap_err()
                .0,
            DENSEFS_RS_TOO_LARGE
        );
        let ptrs = [ca.as_ptr(), cb.as_ptr()];
        let lens = [ca.len(), cb.len()];
        let joined =
            take(unsafe { densefs_rs_broccoli_concat(ptrs.as_ptr(), lens.as_ptr(), 2) }).unwrap();
        let mut expect = a.clone();
        expect.extend_from_slice(&b);
        assert_eq!(
            take(unsafe {
                densefs_rs_broccoli_decompress(joined.as_ptr(), joined.len(), usize::MAX)
            })
            .unwrap(),
            expect
        );
    }

    #[test]
    fn small_inputs_get_the_smallest_window_that_reaches_every_byte() {
        assert_eq!(window_for(0, 22), 17);
        assert_eq!(window_for(3000, 22), 17);
        assert_eq!(window_for((1 << 17) - 16, 22), 17);
        assert_eq!(window_for((1 << 17) - 15, 22), 18);
        assert_eq!(window_for(4 << 20, 22), 22);
        assert_eq!(window_for(4 << 20, 24), 23);
        assert_eq!(window_for(3000, 12), 12); // a configured window below 17 stays
    }

    #[test]
    fn streams_of_different_windows_join() {
        // A small piece declares window 17, a large one 21; joined in either
        // order they decode to both.
        let small = b"short text ".repeat(100);
        let mut seed = 7u64;
        let mut large: Vec<u8> = (0..(1usize << 20))
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (seed >> 56) as u8
            })
            .collect();
        let head = large[..4096].to_vec();
        large.extend_from_slice(&head);
        let cs = take(unsafe { densefs_rs_broccoli_compress(small.as_ptr(), small.len(), 5, 22) })
            .unwrap();
        let cl = take(unsafe { densefs_rs_broccoli_compress(large.as_ptr(), large.len(), 5, 22) })
            .unwrap();
        assert_eq!(brotli_window_bits(&cs), Some(17));
        assert_eq!(brotli_window_bits(&cl), Some(21));
        for (first, second, expect) in [
            (&cs, &cl, [small.clone(), large.clone()].concat()),
            (&cl, &cs, [large.clone(), small.clone()].concat()),
        ] {
            let ptrs = [first.as_ptr(), second.as_ptr()];
            let lens = [first.len(), second.len()];
            let joined =
                take(unsafe { densefs_rs_broccoli_concat(ptrs.as_ptr(), lens.as_ptr(), 2) })
                    .unwrap();
            assert_eq!(
                take(unsafe {
                    densefs_rs_broccoli_decompress(joined.as_ptr(), joined.len(), usize::MAX)
                })
                .unwrap(),
                expect
            );
        }
    }
}
