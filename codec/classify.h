// The file classifier: what kind of data a file holds, from its first bytes
// (magic numbers) and its name. The policy table (policy.h) maps each type
// to a codec. Pure function, no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace densefs::codec {

// File types are persisted in inode records (docs/format.md): these numbers
// are frozen. Never renumber; only append.
enum class file_type : std::uint8_t {
  unknown = 0,      // nothing written yet, or not classified
  other = 1,        // binary data nothing below matched
  jpeg = 2,         // JPEG/JFIF/EXIF
  image = 3,        // already-compressed images: GIF, WebP, HEIC/AVIF, JPEG 2000 (PNG before 13)
  video = 4,        // MP4/MOV/M4V, Matroska/WebM, AVI, MPEG-TS
  audio = 5,        // MP3, AAC/M4A, Ogg/Opus, FLAC
  archive = 6,      // xz, bzip2, zstd, 7z, rar, lz4, gzip with another method, packages
  text = 7,         // plain text and source code
  document = 8,     // PDF, PostScript, RTF, old Office (CFB), HTML/XML/JSON
  database = 9,     // SQLite and other database files
  executable = 10,  // ELF, Mach-O, PE, shared libraries, object files
  gzip = 11,        // gzip files (deflate method): recompressed losslessly by the deflate codec
  zip = 12,         // ZIP and what is built on it (OOXML, ODF, JAR, APK, EPUB, wheels): the same
  png = 13,         // PNG: its pixels recompressed losslessly (deflate codec, codec/png_rows.h)
};
inline constexpr std::size_t k_file_type_count = 14;

// How many leading bytes classify() looks at (more are ignored).
inline constexpr std::size_t k_classify_head_bytes = 4096;

// Classifies a file from its first bytes (`head`, up to
// k_classify_head_bytes; may be shorter or empty) and its name (the last
// path component; may be empty). Magic numbers win over the name; the name
// decides where magic cannot (text vs binary, source files). An empty head
// and an unknown name give file_type::unknown.
file_type classify(std::string_view head, std::string_view name);

// True when `bytes` starts with a JPEG SOI marker followed by a marker
// (FF D8 FF): the only chunks Lepton is attempted on.
bool starts_like_jpeg(std::string_view bytes);

// True when `bytes` starts with a gzip member header using the deflate
// method (1F 8B 08): the only chunks the deflate codec is attempted on.
bool starts_like_gzip(std::string_view bytes);

// "jpeg", "text", ...; "unknown(N)" for numbers this build does not know.
std::string_view file_type_name(file_type t);
std::optional<file_type> file_type_from_name(std::string_view name);
bool is_known_file_type(std::uint8_t value);

}  // namespace densefs::codec
