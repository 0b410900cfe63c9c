/* densefs' Rust codecs (codec/rust/src/lib.rs): Lepton via lepton_jpeg,
 * Broccoli via Dropbox's brotli crate and Deflate via preflate-rs, behind a
 * narrow C ABI.
 *
 * Every call returns a densefs_rs_result: status, output bytes and, when
 * status != DENSEFS_RS_OK, a NUL-terminated error message. `data` and `error`
 * are owned by Rust: release every result with densefs_rs_free() exactly once
 * (freeing a zeroed or already freed result is a no-op). No call unwinds a
 * Rust panic into C: a panic becomes DENSEFS_RS_PANIC. All calls are
 * thread-safe and keep no state between calls. */
#ifndef DENSEFS_CODEC_RS_H
#define DENSEFS_CODEC_RS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  DENSEFS_RS_OK = 0,
  DENSEFS_RS_REJECTED = 1,     /* valid input this codec does not take (fall back) */
  DENSEFS_RS_CORRUPT = 2,      /* corrupt or truncated input, trailing bytes */
  DENSEFS_RS_TOO_LARGE = 3,    /* the output would exceed max_out */
  DENSEFS_RS_BAD_ARGUMENT = 4, /* null pointer, quality or window out of range */
  DENSEFS_RS_PANIC = 5,        /* a panic inside Rust, caught at the boundary */
};

typedef struct densefs_rs_result {
  int32_t status;
  uint8_t* data; /* output (null when empty or on error) */
  size_t len;
  char* error; /* message when status != DENSEFS_RS_OK, else null */
} densefs_rs_result;

void densefs_rs_free(densefs_rs_result* r);

/* Lepton: one JPEG <-> one Lepton file. `threads` caps lepton_jpeg's own
 * threads (1: everything on the calling thread). Encoding does not verify:
 * decode and compare before trusting it. Images larger than 8192 pixels on a
 * side are rejected (and refused when decoding: bounded memory). */
densefs_rs_result densefs_rs_lepton_encode(const uint8_t* jpeg, size_t len, uint32_t threads);
densefs_rs_result densefs_rs_lepton_decode(const uint8_t* lep, size_t len, size_t max_out,
                                           uint32_t threads);

/* Broccoli: a catable, appendable brotli stream with the magic-number header.
 * quality 0..11, lgwin 10..24. Decompression takes exactly one brotli stream
 * (Broccoli or plain, standard windows only) and stops at max_out bytes. */
densefs_rs_result densefs_rs_broccoli_compress(const uint8_t* plain, size_t len, int32_t quality,
                                               int32_t lgwin);
densefs_rs_result densefs_rs_broccoli_decompress(const uint8_t* stored, size_t len, size_t max_out);
/* Joins n Broccoli streams into one brotli stream decoding to the
 * concatenation of their contents (no recompression). */
densefs_rs_result densefs_rs_broccoli_concat(const uint8_t* const* pieces, const size_t* lens,
                                             size_t n);

/* Deflate: lossless recompression of the deflate streams of a container
 * (a gzip file, one or more members, trailing bytes kept; a PNG's IDAT
 * stream; the deflate entries of a zip file). split
 * returns u64 LE skeleton length, the skeleton (kept container bytes and
 * preflate-rs reconstruction data, docs/format.md), then the plain text of
 * every stream; REJECTED when the input is not a whole such file, is
 * truncated, inflates past densefs_rs_deflate_plain_cap(len), or preflate
 * cannot rebuild it. It does not verify: decode and compare. join rebuilds
 * the exact container, at most max_out bytes, and refuses more plain text
 * than densefs_rs_deflate_plain_cap(max_out). */
densefs_rs_result densefs_rs_deflate_split(const uint8_t* data, size_t len);
densefs_rs_result densefs_rs_deflate_join(const uint8_t* skeleton, size_t skeleton_len,
                                          const uint8_t* plain, size_t plain_len, size_t max_out);
/* 64 * len, at least 16 MiB, at most 64 MiB. */
size_t densefs_rs_deflate_plain_cap(size_t len);

#ifdef __cplusplus
}
#endif

#endif /* DENSEFS_CODEC_RS_H */
