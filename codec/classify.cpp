// The file classifier. Order of evidence, strongest first:
//   1. magic numbers in the head (a .txt holding a gzip stream is an archive);
//   2. the name, for the types magic cannot tell apart (text, source,
//      markup, databases without a signature);
//   3. media, archive and executable extensions, but only when the head is
//      too short to carry its signature (a long head that matched no magic
//      under a .jpg name is not trusted to be a JPEG);
//   4. a content heuristic: UTF-8 or UTF-16 text without NULs is text.
//
// A wrong answer costs little either way: a compressed file classified as
// `other` goes through zstd and the raw guard stores it raw (CPU only); a
// compressible file classified as media is stored raw (space only). So the
// rules prefer precise signatures over guesses.
#include "codec/classify.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <unordered_map>

namespace densefs::codec {
namespace {

using namespace std::string_view_literals;

// Heads shorter than this cannot hold most signatures (ISO BMFF needs 12
// bytes, RIFF forms 12, tar/ustar much more), so the name decides for media
// and archives.
constexpr std::size_t k_short_head = 16;

bool has_prefix(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool has_at(std::string_view s, std::size_t offset, std::string_view what) {
  return s.size() >= offset + what.size() && s.substr(offset, what.size()) == what;
}

std::uint8_t byte_at(std::string_view s, std::size_t i) {
  return static_cast<std::uint8_t>(s[i]);
}

std::uint32_t be32(std::string_view s, std::size_t offset) {
  return (std::uint32_t{byte_at(s, offset)} << 24) | (std::uint32_t{byte_at(s, offset + 1)} << 16) |
         (std::uint32_t{byte_at(s, offset + 2)} << 8) | std::uint32_t{byte_at(s, offset + 3)};
}

std::uint32_t le32(std::string_view s, std::size_t offset) {
  return std::uint32_t{byte_at(s, offset)} | (std::uint32_t{byte_at(s, offset + 1)} << 8) |
         (std::uint32_t{byte_at(s, offset + 2)} << 16) |
         (std::uint32_t{byte_at(s, offset + 3)} << 24);
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](char c) {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  });
  return out;
}

// --- ISO base media file format (MP4, MOV, HEIC, AVIF, M4A, CR3) ----------

// The major brand decides image vs audio vs video. Generic brands (isom,
// mp41, ...) say nothing, so then the compatible brands are consulted.
file_type ftyp_brand_type(std::string_view brand) {
  static constexpr std::array image_brands = {"heic"sv, "heix"sv, "heim"sv, "heis"sv, "hevc"sv,
                                              "hevx"sv, "hevm"sv, "hevs"sv, "mif1"sv, "msf1"sv,
                                              "avif"sv, "avis"sv, "avio"sv, "crx "sv, "jpx "sv,
                                              "jp2 "sv, "jpm "sv, "mif2"sv, "miaf"sv};
  static constexpr std::array audio_brands = {"M4A "sv, "M4B "sv, "M4P "sv, "F4A "sv, "F4B "sv};
  if (std::find(image_brands.begin(), image_brands.end(), brand) != image_brands.end()) {
    return file_type::image;
  }
  if (std::find(audio_brands.begin(), audio_brands.end(), brand) != audio_brands.end()) {
    return file_type::audio;
  }
  return file_type::unknown;
}

bool is_generic_brand(std::string_view brand) {
  return has_prefix(brand, "iso") || brand == "mp41" || brand == "mp42" || brand == "mp71";
}

std::optional<file_type> classify_iso_bmff(std::string_view head) {
  if (head.size() >= 12 && has_at(head, 4, "ftyp")) {
    const std::string_view major = head.substr(8, 4);
    if (const auto t = ftyp_brand_type(major); t != file_type::unknown) return t;
    if (is_generic_brand(major)) {
      // Compatible brands start at offset 16 and run to the end of the box.
      const std::size_t box_end = std::min<std::size_t>(be32(head, 0), head.size());
      for (std::size_t at = 16; at + 4 <= box_end; at += 4) {
        if (const auto t = ftyp_brand_type(head.substr(at, 4)); t != file_type::unknown) return t;
      }
    }
    return file_type::video;  // mp4, M4V, qt, 3gp, dash, f4v, ...
  }
  // QuickTime files from before 'ftyp' start straight with a movie box.
  if (head.size() >= 8 && be32(head, 0) >= 8 &&
      (has_at(head, 4, "moov") || has_at(head, 4, "mdat") || has_at(head, 4, "wide"))) {
    return file_type::video;
  }
  return std::nullopt;
}

// --- MPEG audio -----------------------------------------------------------

// Length in bytes of the MPEG audio frame whose 4-byte header starts `h`, or
// 0 if the header is invalid (reserved version, layer, bitrate or sample
// rate; free-format bitrate, which cannot be checked).
std::size_t mpeg_audio_frame_length(std::string_view h) {
  if (h.size() < 4 || byte_at(h, 0) != 0xFF || (byte_at(h, 1) & 0xE0) != 0xE0) return 0;
  const unsigned version = (byte_at(h, 1) >> 3) & 3;  // 0: 2.5, 1: reserved, 2: 2, 3: 1
  const unsigned layer = (byte_at(h, 1) >> 1) & 3;    // 1: III, 2: II, 3: I, 0: reserved
  const unsigned bitrate_index = byte_at(h, 2) >> 4;
  const unsigned rate_index = (byte_at(h, 2) >> 2) & 3;
  const unsigned padding = (byte_at(h, 2) >> 1) & 1;
  if (version == 1 || layer == 0 || bitrate_index == 0 || bitrate_index == 15 || rate_index == 3) {
    return 0;
  }
  static constexpr unsigned v1_l1[] = {0,   32,  64,  96,  128, 160, 192, 224,
                                       256, 288, 320, 352, 384, 416, 448};
  static constexpr unsigned v1_l2[] = {0,   32,  48,  56,  64,  80,  96, 112,
                                       128, 160, 192, 224, 256, 320, 384};
  static constexpr unsigned v1_l3[] = {0,   32,  40,  48,  56,  64,  80, 96,
                                       112, 128, 160, 192, 224, 256, 320};
  static constexpr unsigned v2_l1[] = {0,   32,  48,  56,  64,  80,  96, 112,
                                       128, 144, 160, 176, 192, 224, 256};
  static constexpr unsigned v2_l23[] = {0,  8,  16, 24,  32,  40,  48, 56,
                                        64, 80, 96, 112, 128, 144, 160};
  static constexpr unsigned rates[3][3] = {
      {11025, 12000, 8000}, {0, 0, 0}, {22050, 24000, 16000}};  // indexed by version 0..2
  const bool v1 = version == 3;
  const unsigned sample_rate = v1 ? (rate_index == 0   ? 44100
                                     : rate_index == 1 ? 48000
                                                       : 32000)
                                  : rates[version][rate_index];
  unsigned kbps = 0;
  if (layer == 3) {
    kbps = v1 ? v1_l1[bitrate_index] : v2_l1[bitrate_index];
    return (12 * kbps * 1000 / sample_rate + padding) * 4;
  }
  if (layer == 2) {
    kbps = v1 ? v1_l2[bitrate_index] : v2_l23[bitrate_index];
    return 144 * kbps * 1000 / sample_rate + padding;
  }
  kbps = v1 ? v1_l3[bitrate_index] : v2_l23[bitrate_index];
  return (v1 ? 144 : 72) * kbps * 1000 / sample_rate + padding;
}

// Frame sync is only 11 bits, which random binary data matches often; a
// second frame header exactly one frame later is required whenever the head
// reaches that far.
bool looks_like_mpeg_audio(std::string_view head) {
  const std::size_t length = mpeg_audio_frame_length(head);
  if (length == 0) return false;
  if (head.size() < length + 4) return head.size() < k_classify_head_bytes;
  return mpeg_audio_frame_length(head.substr(length)) != 0;
}

// AAC in ADTS framing: 12-bit sync, layer 00, then a 13-bit frame length.
bool looks_like_adts(std::string_view head) {
  if (head.size() < 7 || byte_at(head, 0) != 0xFF || (byte_at(head, 1) & 0xF6) != 0xF0) {
    return false;
  }
  if (((byte_at(head, 2) >> 2) & 0xF) > 12) return false;  // sampling frequency index
  const std::size_t length = ((std::size_t{byte_at(head, 3)} & 3) << 11) |
                             (std::size_t{byte_at(head, 4)} << 3) | (byte_at(head, 5) >> 5);
  if (length < 7) return false;
  if (head.size() < length + 2) return head.size() < k_classify_head_bytes;
  return byte_at(head, length) == 0xFF && (byte_at(head, length + 1) & 0xF6) == 0xF0;
}

// MPEG transport stream: a 0x47 sync byte every 188 bytes (192 for M2TS,
// whose packets carry a 4-byte timestamp first). Needs at least two packets.
bool looks_like_mpeg_ts(std::string_view head) {
  for (const std::size_t offset : {std::size_t{0}, std::size_t{4}}) {
    const std::size_t stride = offset == 0 ? 188 : 192;
    if (head.size() < offset + stride + 1) continue;
    bool all = true;
    for (std::size_t at = offset; at < head.size(); at += stride) {
      if (byte_at(head, at) != 0x47) {
        all = false;
        break;
      }
    }
    if (all) return true;
  }
  return false;
}

// --- Executables ------------------------------------------------------------

// "MZ" alone is too weak (plain text can start with it). A real DOS/PE
// header points at "PE\0\0" (e_lfanew at 0x3C) or, for the part the head
// cannot show, has NULs in its fixed 64-byte header, which text never does.
bool looks_like_pe(std::string_view head) {
  if (!has_prefix(head, "MZ") || head.size() < 64) return false;
  const std::size_t pe = le32(head, 0x3C);
  if (pe + 4 <= head.size()) return has_at(head, pe, "PE\0\0"sv);
  return head.substr(0, 64).find('\0') != std::string_view::npos;
}

// --- Magic numbers ------------------------------------------------------------

std::optional<file_type> classify_magic(std::string_view h) {
  // Images.
  if (starts_like_jpeg(h)) return file_type::jpeg;
  if (has_prefix(h, "\x89PNG\r\n\x1a\n"sv)) return file_type::png;
  if (has_prefix(h, "GIF87a") || has_prefix(h, "GIF89a")) return file_type::image;
  // JPEG 2000 (signature box, or a bare codestream) and JPEG XL (the same
  // two forms).
  if (has_prefix(h, "\0\0\0\x0CjP  \r\n\x87\n"sv)) return file_type::image;
  if (has_prefix(h, "\xFF\x4F\xFF\x51"sv)) return file_type::image;
  if (has_prefix(h, "\0\0\0\x0CJXL \r\n\x87\n"sv)) return file_type::image;
  if (has_prefix(h, "\xFF\x0A"sv)) return file_type::image;

  // RIFF containers: the form type at offset 8 decides. WAV (and other
  // uncompressed forms) compresses well, so it is `other` and gets zstd.
  if (has_prefix(h, "RIFF") && h.size() >= 12) {
    const std::string_view form = h.substr(8, 4);
    if (form == "WEBP") return file_type::image;
    if (form == "AVI " || form == "AVIX") return file_type::video;
    return file_type::other;  // WAVE, RMID, ...
  }

  if (const auto t = classify_iso_bmff(h)) return t;
  if (has_prefix(h, "\x1A\x45\xDF\xA3"sv)) return file_type::video;  // Matroska, WebM
  if (has_prefix(h, "FLV\x01"sv)) return file_type::video;
  if (has_prefix(h, "\x30\x26\xB2\x75\x8E\x66\xCF\x11"sv)) return file_type::video;  // ASF/WMV/WMA
  if (has_prefix(h, "\0\0\x01\xBA"sv) || has_prefix(h, "\0\0\x01\xB3"sv)) {
    return file_type::video;  // MPEG program stream, MPEG video
  }
  if (looks_like_mpeg_ts(h)) return file_type::video;

  // Audio. UTF-16 text is checked by the caller before this, since its byte
  // order mark FF FE can pass for an MPEG audio frame sync.
  if (has_prefix(h, "ID3")) return file_type::audio;
  if (has_prefix(h, "OggS") || has_prefix(h, "fLaC")) return file_type::audio;
  if (has_prefix(h, "wvpk") || has_prefix(h, "MAC ") || has_prefix(h, "#!AMR")) {
    return file_type::audio;
  }
  if (looks_like_adts(h)) return file_type::audio;
  if (looks_like_mpeg_audio(h)) return file_type::audio;

  // Archives and compressed streams. ZIP also covers OOXML, ODF, JAR, APK
  // and EPUB, whose members are deflated (the deflate codec takes them).
  if (has_prefix(h, "PK\x03\x04"sv) || has_prefix(h, "PK\x05\x06"sv) ||
      has_prefix(h, "PK\x07\x08"sv)) {
    return file_type::zip;
  }
  if (starts_like_gzip(h)) return file_type::gzip;
  if (has_prefix(h, "\x1F\x8B"sv)) return file_type::archive;  // gzip with another method
  if (has_prefix(h, "\x1F\x9D"sv)) return file_type::archive;  // compress (.Z)
  if (has_prefix(h,
                 "\xFD"
                 "7zXZ\0"sv))
    return file_type::archive;                                                // xz
  if (has_prefix(h, "BZh") && h.size() >= 4 && h[3] >= '1' && h[3] <= '9') {  // bzip2
    return file_type::archive;
  }
  if (has_prefix(h, "\x28\xB5\x2F\xFD"sv)) return file_type::archive;  // zstd frame
  if (h.size() >= 4 && (le32(h, 0) & 0xFFFFFFF0u) == 0x184D2A50u) {
    return file_type::archive;  // zstd/lz4 skippable frame
  }
  if (has_prefix(h, "7z\xBC\xAF\x27\x1C"sv)) return file_type::archive;
  if (has_prefix(h, "Rar!\x1A\x07"sv)) return file_type::archive;      // RAR 4 and 5
  if (has_prefix(h, "\x04\x22\x4D\x18"sv)) return file_type::archive;  // lz4 frame
  if (has_prefix(h, "\x02\x21\x4C\x18"sv)) return file_type::archive;  // lz4 legacy
  if (has_prefix(h, "LZIP") || has_prefix(h, "MSCF") || has_prefix(h, "xar!")) {
    return file_type::archive;
  }
  if (has_prefix(h, "\xED\xAB\xEE\xDB"sv)) return file_type::archive;  // RPM (compressed payload)
  if (has_prefix(h, "hsqs")) return file_type::archive;                // squashfs

  // Documents.
  // PDF readers accept the header anywhere in the first 1024 bytes.
  if (h.substr(0, 1024).find("%PDF-") != std::string_view::npos) return file_type::document;
  if (has_prefix(h, "%!PS") || has_prefix(h, "\xC5\xD0\xD3\xC6"sv)) return file_type::document;
  if (has_prefix(h, "{\\rtf")) return file_type::document;
  if (has_prefix(h, "\xD0\xCF\x11\xE0\xA1\xB1\x1A\xE1"sv)) return file_type::document;  // CFB

  // Databases.
  if (has_prefix(h, "SQLite format 3\0"sv)) return file_type::database;
  if (has_at(h, 4, "Standard Jet DB") || has_at(h, 4, "Standard ACE DB")) {
    return file_type::database;  // Access .mdb / .accdb
  }

  // Executables and object code.
  if (has_prefix(h,
                 "\x7F"
                 "ELF"sv))
    return file_type::executable;
  if (h.size() >= 4) {
    const std::uint32_t m = be32(h, 0);
    if (m == 0xFEEDFACE || m == 0xCEFAEDFE || m == 0xFEEDFACF || m == 0xCFFAEDFE) {
      return file_type::executable;  // Mach-O
    }
    // CA FE BA BE is both a Mach-O universal binary and a Java class file:
    // executable either way.
    if (m == 0xCAFEBABE) return file_type::executable;
  }
  if (has_prefix(h, "!<arch>\n")) {
    // A Debian package is an ar archive of compressed tarballs; other ar
    // archives are static libraries of object files.
    if (has_at(h, 8, "debian-binary")) return file_type::archive;
    return file_type::executable;
  }
  if (has_prefix(h, "\0asm"sv)) return file_type::executable;       // WebAssembly
  if (has_prefix(h, "BC\xC0\xDE"sv)) return file_type::executable;  // LLVM bitcode
  if (looks_like_pe(h)) return file_type::executable;
  return std::nullopt;
}

// --- Names --------------------------------------------------------------------

// Extensions (lower case) whose meaning the content cannot be trusted to
// show: text, source and markup have no magic. These win over the content
// heuristic at any head length.
//
// HTML, XML, JSON, SVG and similar structured markup are `document`, not
// `text`: both map to Broccoli by default, so the choice costs nothing, and a
// separate type lets a store tune markup apart from prose and source (e.g.
// "document=zstd" for a tree of generated JSON that changes often).
const std::unordered_map<std::string_view, file_type>& trusted_extensions() {
  static const auto* table = [] {
    auto* m = new std::unordered_map<std::string_view, file_type>;
    for (const auto ext :
         {// prose and notes
          "txt"sv, "text"sv, "md"sv, "markdown"sv, "rst"sv, "adoc"sv, "asciidoc"sv, "org"sv,
          "tex"sv, "sty"sv, "cls"sv, "bib"sv, "texi"sv, "man"sv, "nfo"sv, "srt"sv, "vtt"sv, "ass"sv,
          "ics"sv, "vcf"sv, "ldif"sv, "po"sv, "pot"sv, "diff"sv, "patch"sv, "log"sv,
          // C family and native languages
          "c"sv, "h"sv, "cc"sv, "cpp"sv, "cxx"sv, "c++"sv, "hh"sv, "hpp"sv, "hxx"sv, "ipp"sv,
          "inl"sv, "tcc"sv, "m"sv, "mm"sv, "s"sv, "asm"sv, "rs"sv, "go"sv, "zig"sv, "d"sv, "nim"sv,
          "f"sv, "f90"sv, "f95"sv, "for"sv, "pas"sv, "adb"sv, "ads"sv, "swift"sv, "v"sv, "sv"sv,
          "vhd"sv, "vhdl"sv,
          // managed and scripting languages
          "java"sv, "kt"sv, "kts"sv, "scala"sv, "groovy"sv, "gradle"sv, "cs"sv, "fs"sv, "fsx"sv,
          "vb"sv, "dart"sv, "py"sv, "pyi"sv, "pyw"sv, "rb"sv, "pl"sv, "pm"sv, "pod"sv, "php"sv,
          "lua"sv, "tcl"sv, "r"sv, "jl"sv, "js"sv, "mjs"sv, "cjs"sv, "jsx"sv, "ts"sv, "tsx"sv,
          "vue"sv, "svelte"sv, "coffee"sv, "elm"sv, "erl"sv, "hrl"sv, "ex"sv, "exs"sv, "hs"sv,
          "lhs"sv, "ml"sv, "mli"sv, "clj"sv, "cljs"sv, "lisp"sv, "el"sv, "scm"sv, "rkt"sv, "awk"sv,
          "sed"sv, "sql"sv, "vim"sv,
          // shells and builds
          "sh"sv, "bash"sv, "zsh"sv, "fish"sv, "ksh"sv, "csh"sv, "ps1"sv, "bat"sv, "cmd"sv,
          "cmake"sv, "mk"sv, "mak"sv, "make"sv, "am"sv, "ac"sv, "m4"sv, "in"sv, "bzl"sv, "ninja"sv,
          // configuration and tabular data
          "csv"sv, "tsv"sv, "yaml"sv, "yml"sv, "toml"sv, "ini"sv, "cfg"sv, "conf"sv, "config"sv,
          "properties"sv, "env"sv, "desktop"sv, "service"sv, "css"sv, "scss"sv, "sass"sv,
          "less"sv}) {
      m->emplace(ext, file_type::text);
    }
    for (const auto ext :
         {"html"sv, "htm"sv,  "xhtml"sv, "xml"sv,   "xsl"sv,    "xslt"sv,    "xsd"sv,
          "dtd"sv,  "svg"sv,  "json"sv,  "jsonl"sv, "ndjson"sv, "geojson"sv, "ipynb"sv,
          "rss"sv,  "atom"sv, "plist"sv, "pdf"sv,   "ps"sv,     "eps"sv,     "rtf"sv,
          "doc"sv,  "xls"sv,  "ppt"sv,   "msg"sv,   "docbook"sv}) {
      m->emplace(ext, file_type::document);
    }
    for (const auto ext : {"sqlite"sv, "sqlite3"sv, "db"sv, "db3"sv, "mdb"sv, "accdb"sv, "dbf"sv,
                           "ldb"sv, "sst"sv}) {
      m->emplace(ext, file_type::database);
    }
    return m;
  }();
  return *table;
}

// Extensions of formats that carry a signature: used only when the head is
// too short (or empty) to show it.
const std::unordered_map<std::string_view, file_type>& signature_extensions() {
  static const auto* table = [] {
    auto* m = new std::unordered_map<std::string_view, file_type>;
    for (const auto ext : {"jpg"sv, "jpeg"sv, "jpe"sv, "jfif"sv}) m->emplace(ext, file_type::jpeg);
    m->emplace("png"sv, file_type::png);
    for (const auto ext : {"gif"sv, "webp"sv, "heic"sv, "heif"sv, "avif"sv, "jp2"sv, "j2k"sv,
                           "jpf"sv, "jpx"sv, "jxl"sv, "cr3"sv}) {
      m->emplace(ext, file_type::image);
    }
    for (const auto ext : {"mp4"sv, "m4v"sv, "mov"sv, "qt"sv, "mkv"sv, "webm"sv, "avi"sv, "m2ts"sv,
                           "mts"sv, "mpg"sv, "mpeg"sv, "wmv"sv, "flv"sv, "3gp"sv}) {
      m->emplace(ext, file_type::video);
    }
    for (const auto ext : {"mp3"sv, "m4a"sv, "m4b"sv, "aac"sv, "ogg"sv, "oga"sv, "opus"sv, "flac"sv,
                           "wma"sv, "wv"sv, "ape"sv, "amr"sv}) {
      m->emplace(ext, file_type::audio);
    }
    for (const auto ext : {"zip"sv, "jar"sv, "war"sv, "apk"sv, "epub"sv, "docx"sv, "xlsx"sv,
                           "pptx"sv, "odt"sv, "ods"sv, "odp"sv, "ott"sv, "whl"sv}) {
      m->emplace(ext, file_type::zip);
    }
    for (const auto ext :
         {"xz"sv, "txz"sv, "bz2"sv, "tbz2"sv, "zst"sv, "tzst"sv, "7z"sv, "rar"sv, "lz4"sv, "lz"sv,
          "lzma"sv, "br"sv, "cab"sv, "deb"sv, "rpm"sv, "squashfs"sv, "z"sv}) {
      m->emplace(ext, file_type::archive);
    }
    for (const auto ext : {"gz"sv, "tgz"sv}) m->emplace(ext, file_type::gzip);
    for (const auto ext :
         {"exe"sv, "dll"sv, "so"sv, "o"sv, "a"sv, "ko"sv, "dylib"sv, "wasm"sv, "class"sv}) {
      m->emplace(ext, file_type::executable);
    }
    return m;
  }();
  return *table;
}

// Conventional names of text files that have no extension.
bool is_text_file_name(std::string_view lower_name) {
  static constexpr std::array names = {
      "makefile"sv,      "gnumakefile"sv, "dockerfile"sv, "containerfile"sv, "readme"sv,
      "license"sv,       "licence"sv,     "copying"sv,    "changelog"sv,     "changes"sv,
      "news"sv,          "authors"sv,     "install"sv,    "todo"sv,          "notice"sv,
      "contributors"sv,  "vagrantfile"sv, "gemfile"sv,    "rakefile"sv,      "jenkinsfile"sv,
      "cmakelists.txt"sv};
  return std::find(names.begin(), names.end(), lower_name) != names.end();
}

// The extension after the last '.', lower case; none for dotfiles such as
// ".bashrc" (the content decides those).
std::string extension_of(std::string_view lower_name) {
  const auto dot = lower_name.rfind('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == lower_name.size()) return {};
  return std::string(lower_name.substr(dot + 1));
}

std::optional<file_type> lookup(const std::unordered_map<std::string_view, file_type>& table,
                                std::string_view ext) {
  if (ext.empty()) return std::nullopt;
  if (const auto it = table.find(ext); it != table.end()) return it->second;
  return std::nullopt;
}

// --- Content heuristic -----------------------------------------------------------

// Control characters text legitimately contains: tab, LF, VT, FF, CR, ESC
// (terminal colours in logs), backspace (man page overstrike).
bool is_text_control(std::uint8_t c) {
  return c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r' || c == 0x1B || c == '\b';
}

// Valid UTF-8 (ASCII included) without NULs and with few other control
// characters. A multi-byte sequence cut off at the end of a full-length head
// is fine: the head is an arbitrary prefix of the file.
bool looks_like_utf8_text(std::string_view h) {
  std::size_t controls = 0;
  std::size_t i = 0;
  while (i < h.size()) {
    const std::uint8_t c = byte_at(h, i);
    if (c < 0x80) {
      if (c == 0) return false;
      if ((c < 0x20 && !is_text_control(c)) || c == 0x7F) ++controls;
      ++i;
      continue;
    }
    std::size_t extra = 0;
    std::uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;  // continuation byte without a lead, overlong C0/C1, F5..FF
    }
    if (i + extra >= h.size() + (h.size() >= k_classify_head_bytes ? extra : 0)) return false;
    std::size_t j = 1;
    for (; j <= extra && i + j < h.size(); ++j) {
      const std::uint8_t cc = byte_at(h, i + j);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (j > extra) {  // complete sequence: reject overlong forms and surrogates
      if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
          (cp >= 0xD800 && cp <= 0xDFFF)) {
        return false;
      }
    }
    i += j;
  }
  // More than 1 in 32 bytes being stray control characters is binary data
  // that happens to avoid NULs, not text.
  return controls * 32 <= h.size();
}

// UTF-16 with a byte order mark (Windows "Unicode" text files): no NUL code
// units and no unpaired surrogates.
bool looks_like_utf16_text(std::string_view h) {
  if (h.size() < 4) return false;
  bool little;
  if (byte_at(h, 0) == 0xFF && byte_at(h, 1) == 0xFE) {
    little = true;
  } else if (byte_at(h, 0) == 0xFE && byte_at(h, 1) == 0xFF) {
    little = false;
  } else {
    return false;
  }
  if (h.size() >= 4 && byte_at(h, 2) == 0 && byte_at(h, 3) == 0) return false;  // UTF-32 LE BOM
  std::size_t controls = 0;
  std::size_t units = 0;
  bool want_low = false;
  for (std::size_t i = 2; i + 1 < h.size(); i += 2, ++units) {
    const unsigned u = little ? (byte_at(h, i) | (byte_at(h, i + 1) << 8))
                              : ((byte_at(h, i) << 8) | byte_at(h, i + 1));
    if (u == 0) return false;
    const bool high = u >= 0xD800 && u <= 0xDBFF;
    const bool low = u >= 0xDC00 && u <= 0xDFFF;
    if (want_low != low) return false;
    want_low = high;
    if ((u < 0x20 && !is_text_control(static_cast<std::uint8_t>(u))) || u == 0x7F) ++controls;
  }
  return units > 0 && controls * 32 <= units;
}

// Markup is `document` (see trusted_extensions): recognise it by content too,
// for files with no telling name.
bool starts_like_markup(std::string_view h) {
  if (has_prefix(h, "\xEF\xBB\xBF"sv)) h.remove_prefix(3);
  const auto first = h.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return false;
  const std::string start = lower(h.substr(first, 16));
  return has_prefix(start, "<?xml") || has_prefix(start, "<!doctype html") ||
         has_prefix(start, "<html") || has_prefix(start, "<svg");
}

}  // namespace

bool starts_like_jpeg(std::string_view bytes) {
  return has_prefix(bytes, "\xFF\xD8\xFF"sv);
}

bool starts_like_gzip(std::string_view bytes) {
  return has_prefix(bytes, "\x1F\x8B\x08"sv);
}

file_type classify(std::string_view head, std::string_view name) {
  head = head.substr(0, k_classify_head_bytes);
  const std::string lower_name = lower(name);
  const std::string ext = extension_of(lower_name);

  if (!head.empty()) {
    // UTF-16 text first: its byte order mark would otherwise be taken for
    // the start of an MPEG audio frame.
    if (looks_like_utf16_text(head)) {
      if (const auto t = lookup(trusted_extensions(), ext)) return *t;
      return file_type::text;
    }
    if (const auto t = classify_magic(head)) return *t;
  }
  if (const auto t = lookup(trusted_extensions(), ext)) return *t;
  if (is_text_file_name(lower_name)) return file_type::text;
  if (head.size() < k_short_head) {
    if (const auto t = lookup(signature_extensions(), ext)) return *t;
  }
  if (head.empty()) return file_type::unknown;
  if (looks_like_utf8_text(head)) {
    return starts_like_markup(head) ? file_type::document : file_type::text;
  }
  return file_type::other;
}

namespace {

constexpr std::array<std::string_view, k_file_type_count> k_type_names = {
    "unknown", "other",    "jpeg",     "image",      "video", "audio", "archive",
    "text",    "document", "database", "executable", "gzip",  "zip",   "png"};

}  // namespace

std::string_view file_type_name(file_type t) {
  const auto i = static_cast<std::size_t>(t);
  if (i < k_type_names.size()) return k_type_names[i];
  // Numbers from a newer build: a stable string per value, built once.
  static const auto* unknown_names = [] {
    auto* names = new std::array<std::string, 256>;
    for (std::size_t v = 0; v < names->size(); ++v) {
      (*names)[v] = "unknown(" + std::to_string(v) + ")";
    }
    return names;
  }();
  return (*unknown_names)[i];
}

std::optional<file_type> file_type_from_name(std::string_view name) {
  for (std::size_t i = 0; i < k_type_names.size(); ++i) {
    if (k_type_names[i] == name) return static_cast<file_type>(i);
  }
  return std::nullopt;
}

bool is_known_file_type(std::uint8_t value) {
  return value < k_file_type_count;
}

}  // namespace densefs::codec
