// The file classifier: magic numbers for every supported format, names,
// the text heuristic, edge cases, and the real JPEG corpus.
#include "codec/classify.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "tests/test_env.h"

namespace densefs::codec {
namespace {

using namespace std::string_literals;
using namespace std::string_view_literals;

// A head that starts with `magic` and is padded to `size` with binary
// filler (no text, no further signatures) so the magic alone decides.
std::string head_with(std::string_view magic, std::size_t size = 512) {
  std::string h(magic);
  std::mt19937 rng(42);
  while (h.size() < size) h += static_cast<char>(0x80 | (rng() & 0x0F));  // never valid UTF-8
  return h;
}

std::string be32(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string ftyp(std::string_view major, std::initializer_list<std::string_view> compatible = {}) {
  std::string box = "ftyp" + std::string(major) + "\0\0\0\0"s;
  for (const auto b : compatible) box += b;
  return be32(static_cast<std::uint32_t>(box.size() + 4)) + box;
}

std::string riff(std::string_view form) {
  return "RIFF\x24\x08\0\0"s + std::string(form);
}

// Two consecutive MPEG-1 Layer III frames, 128 kbit/s at 44.1 kHz: 417 bytes
// each, no padding.
std::string mp3_frames() {
  std::string frame = "\xFF\xFB\x90\x00"s;
  frame.resize(417, '\x55');
  return frame + frame + frame;
}

// AAC ADTS frames of 100 bytes each.
std::string adts_frames() {
  std::string frame = "\xFF\xF1\x50\x80\x0C\x9F\xFC"s;  // length 100 in bits 30..42
  frame.resize(100, '\x11');
  return frame + frame + frame;
}

std::string ts_packets(std::size_t packets, std::size_t stride, std::size_t prefix) {
  std::string s(packets * stride, '\x01');
  for (std::size_t p = 0; p < packets; ++p) s[p * stride + prefix] = '\x47';
  return s;
}

TEST(classify_test, images) {
  EXPECT_EQ(classify(head_with("\xFF\xD8\xFF\xE0"sv), ""), file_type::jpeg);
  EXPECT_EQ(classify(head_with("\xFF\xD8\xFF\xE1"sv), "x.bin"), file_type::jpeg);
  EXPECT_EQ(classify(head_with("\x89PNG\r\n\x1a\n"sv), ""), file_type::png);
  EXPECT_EQ(classify(head_with("\x89PNG\r\n\x1a\n"sv), "icon.gif"), file_type::png);
  EXPECT_EQ(classify(head_with("GIF89a"), ""), file_type::image);
  EXPECT_EQ(classify(head_with("GIF87a"), ""), file_type::image);
  EXPECT_EQ(classify(head_with(riff("WEBP") + "VP8 "), ""), file_type::image);
  EXPECT_EQ(classify(head_with("\0\0\0\x0CjP  \r\n\x87\n"s), ""), file_type::image);
  EXPECT_EQ(classify(head_with("\xFF\x4F\xFF\x51"sv), ""), file_type::image);
  EXPECT_EQ(classify(head_with("\0\0\0\x0CJXL \r\n\x87\n"s), ""), file_type::image);
  EXPECT_EQ(classify(head_with(ftyp("heic", {"mif1", "heic"})), ""), file_type::image);
  EXPECT_EQ(classify(head_with(ftyp("avif", {"mif1", "avif"})), ""), file_type::image);
  EXPECT_EQ(classify(head_with(ftyp("mif1", {"heic"})), ""), file_type::image);
  // A generic major brand with an image brand among the compatible ones.
  EXPECT_EQ(classify(head_with(ftyp("isom", {"isom", "avif"})), ""), file_type::image);
}

TEST(classify_test, video) {
  EXPECT_EQ(classify(head_with(ftyp("isom", {"isom", "iso2", "avc1", "mp41"})), ""),
            file_type::video);
  EXPECT_EQ(classify(head_with(ftyp("mp42")), "clip.m4a"), file_type::video);  // magic wins
  EXPECT_EQ(classify(head_with(ftyp("qt  ")), ""), file_type::video);
  EXPECT_EQ(classify(head_with(ftyp("3gp5")), ""), file_type::video);
  EXPECT_EQ(classify(head_with(be32(0x20) + "moov"), ""), file_type::video);  // old QuickTime
  EXPECT_EQ(classify(head_with("\x1A\x45\xDF\xA3"sv), ""), file_type::video);
  EXPECT_EQ(classify(head_with(riff("AVI ") + "LIST"), ""), file_type::video);
  EXPECT_EQ(classify(ts_packets(8, 188, 0), ""), file_type::video);
  EXPECT_EQ(classify(ts_packets(8, 192, 4), ""), file_type::video);  // M2TS
  EXPECT_EQ(classify(head_with("\0\0\x01\xBA"s), ""), file_type::video);
}

TEST(classify_test, audio) {
  EXPECT_EQ(classify(head_with(ftyp("M4A ", {"M4A ", "mp42", "isom"})), ""), file_type::audio);
  EXPECT_EQ(classify(head_with(ftyp("isom", {"M4A "})), ""), file_type::audio);
  EXPECT_EQ(classify(head_with("ID3\x04\0\0\0\0\0\0"s), ""), file_type::audio);
  EXPECT_EQ(classify(mp3_frames(), ""), file_type::audio);
  EXPECT_EQ(classify(adts_frames(), ""), file_type::audio);
  EXPECT_EQ(classify(head_with("OggS\0\x02"s), ""), file_type::audio);
  EXPECT_EQ(classify(head_with("fLaC\0\0\0\x22"s), ""), file_type::audio);
}

TEST(classify_test, mpeg_audio_sync_needs_a_second_frame) {
  // FF FB at the start of random data is not enough: the next frame header
  // must follow one frame length later.
  std::string fake = mp3_frames();
  fake[417] = '\x00';
  EXPECT_EQ(classify(fake, ""), file_type::other);
  std::string fake_adts = adts_frames();
  fake_adts[100] = '\x00';
  EXPECT_EQ(classify(fake_adts, ""), file_type::other);
}

TEST(classify_test, wav_and_other_riff_are_other) {
  // Uncompressed PCM compresses: it must get zstd, not raw.
  EXPECT_EQ(classify(head_with(riff("WAVE") + "fmt "), "song.wav"), file_type::other);
  EXPECT_EQ(classify(head_with(riff("RMID")), ""), file_type::other);
}

TEST(classify_test, archives) {
  // ZIP and what is built on it have a type of their own (the deflate codec
  // takes their deflated entries).
  EXPECT_EQ(classify(head_with("PK\x03\x04"sv), ""), file_type::zip);
  EXPECT_EQ(classify(head_with("PK\x03\x04"sv), "report.docx"), file_type::zip);
  EXPECT_EQ(classify(head_with("PK\x03\x04"sv), "notes.txt"), file_type::zip);
  EXPECT_EQ(classify(head_with("PK\x05\x06"sv), ""), file_type::zip);  // empty zip
  // gzip with the deflate method has a type of its own (the deflate codec
  // takes it); another method stays an archive.
  EXPECT_EQ(classify(head_with("\x1F\x8B\x08"sv), "notes.txt"), file_type::gzip);
  EXPECT_EQ(classify(head_with("\x1F\x8B\x08"sv), "man.1.gz"), file_type::gzip);
  EXPECT_EQ(classify(head_with("\x1F\x8B\x07"sv), "odd.gz"), file_type::archive);
  EXPECT_EQ(classify(head_with("\xFD"
                               "7zXZ\0"s),
                     ""),
            file_type::archive);
  EXPECT_EQ(classify(head_with("BZh9"), ""), file_type::archive);
  EXPECT_EQ(classify(head_with("\x28\xB5\x2F\xFD"sv), ""), file_type::archive);
  EXPECT_EQ(classify(head_with("7z\xBC\xAF\x27\x1C"sv), ""), file_type::archive);
  EXPECT_EQ(classify(head_with("Rar!\x1A\x07\x00"s), ""), file_type::archive);
  EXPECT_EQ(classify(head_with("Rar!\x1A\x07\x01\x00"s), ""), file_type::archive);
  EXPECT_EQ(classify(head_with("\x04\x22\x4D\x18"sv), ""), file_type::archive);
  EXPECT_EQ(classify(head_with("!<arch>\ndebian-binary   "), "x.deb"), file_type::archive);
  // "BZh" followed by something other than a block size digit is not bzip2.
  EXPECT_EQ(classify("BZhello there, plain text", ""), file_type::text);
}

TEST(classify_test, documents) {
  EXPECT_EQ(classify(head_with("%PDF-1.7\n"), ""), file_type::document);
  // Readers accept junk before the PDF header.
  EXPECT_EQ(classify(std::string(100, '\x01') + "%PDF-1.4\n" + head_with(""), ""),
            file_type::document);
  EXPECT_EQ(classify("%!PS-Adobe-3.0\n%%Title: x\n", ""), file_type::document);
  EXPECT_EQ(classify("{\\rtf1\\ansi hello}", ""), file_type::document);
  EXPECT_EQ(classify(head_with("\xD0\xCF\x11\xE0\xA1\xB1\x1A\xE1"sv), "old.doc"),
            file_type::document);
}

TEST(classify_test, databases) {
  EXPECT_EQ(classify(head_with("SQLite format 3\0"s), "places"), file_type::database);
  // Without the NUL it is just a sentence.
  EXPECT_EQ(classify("SQLite format 3 is a file format", ""), file_type::text);
}

TEST(classify_test, executables) {
  EXPECT_EQ(classify(head_with("\x7F"
                               "ELF\x02\x01\x01"s),
                     "libc.so.6"),
            file_type::executable);
  EXPECT_EQ(classify(head_with("\xCF\xFA\xED\xFE"sv), ""), file_type::executable);
  EXPECT_EQ(classify(head_with("\xFE\xED\xFA\xCE"sv), ""), file_type::executable);
  EXPECT_EQ(classify(head_with("\xCA\xFE\xBA\xBE"sv), ""), file_type::executable);
  EXPECT_EQ(classify(head_with("!<arch>\n/               "), "libfoo.a"), file_type::executable);
  EXPECT_EQ(classify(head_with("\0asm\x01\0\0\0"s), ""), file_type::executable);

  // PE: MZ header whose e_lfanew (0x3C) points at "PE\0\0".
  std::string pe = "MZ"s + std::string(0x3A, '\0');
  pe += "\x80\0\0\0"s;  // e_lfanew = 0x80
  pe.resize(0x80, '\0');
  pe += "PE\0\0"s;
  pe.resize(512, '\0');
  EXPECT_EQ(classify(pe, "setup.exe"), file_type::executable);
  // Text that happens to start with "MZ" is still text.
  EXPECT_EQ(classify("MZ is the start of this sentence, which goes on for a while "
                     "longer than sixty four bytes of plain text.",
                     ""),
            file_type::text);
}

TEST(classify_test, magic_wins_over_name) {
  EXPECT_EQ(classify(head_with("\xFF\xD8\xFF\xDB"sv), "readme.txt"), file_type::jpeg);
  EXPECT_EQ(classify(head_with("%PDF-1.5"), "data.json"), file_type::document);
}

TEST(classify_test, names_decide_text_source_and_markup) {
  const std::string text = "int main() { return 0; }\n";
  for (const auto* name :
       {"a.c",        "a.CC",       "main.cpp", "x.h",        "x.HPP",      "x.py",
        "lib.rs",     "m.go",       "A.java",   "app.js",     "app.ts",     "data.csv",
        "t.tsv",      "server.log", "c.yaml",   "c.yml",      "Cargo.toml", "php.ini",
        "nginx.conf", "run.sh",     "q.sql",    "paper.tex",  "README.md",  "notes.txt",
        "doc.rst",    "style.css",  "Makefile", "Dockerfile", "LICENSE",    "CMakeLists.txt"}) {
    EXPECT_EQ(classify(text, name), file_type::text) << name;
  }
  for (const auto* name :
       {"index.html", "page.HTM", "pom.xml", "data.json", "icon.svg", "feed.rss", "nb.ipynb"}) {
    EXPECT_EQ(classify(text, name), file_type::document) << name;
  }
  for (const auto* name : {"app.db", "x.sqlite", "y.sqlite3"}) {
    EXPECT_EQ(classify(head_with("\x01\x02"sv), name), file_type::database) << name;
  }
  // A source name wins over binary-looking content (e.g. a Latin-1 file).
  EXPECT_EQ(classify("caf\xE9 au lait\n"s, "menu.txt"), file_type::text);
}

TEST(classify_test, media_names_only_when_the_head_is_too_short) {
  EXPECT_EQ(classify("", "photo.JPG"), file_type::jpeg);
  EXPECT_EQ(classify("\xFF\xD8", "photo.jpeg"), file_type::jpeg);
  EXPECT_EQ(classify("", "a.png"), file_type::png);
  EXPECT_EQ(classify("", "a.gif"), file_type::image);
  EXPECT_EQ(classify("", "movie.mkv"), file_type::video);
  EXPECT_EQ(classify("", "song.mp3"), file_type::audio);
  EXPECT_EQ(classify("", "backup.tar.gz"), file_type::gzip);
  EXPECT_EQ(classify("", "backup.tgz"), file_type::gzip);
  EXPECT_EQ(classify("", "backup.tar.xz"), file_type::archive);
  for (const char* name : {"a.zip", "b.jar", "c.docx", "d.odt", "e.ott", "f.whl", "g.epub"})
    EXPECT_EQ(classify("", name), file_type::zip) << name;
  EXPECT_EQ(classify("", "libx.so"), file_type::executable);
  EXPECT_EQ(classify("", "doc.pdf"), file_type::document);
  // A long head that matches no signature is not trusted to be a JPEG.
  EXPECT_EQ(classify(head_with("not a jpeg"), "photo.jpg"), file_type::other);
  EXPECT_EQ(classify(std::string(100, 'a') + "\n", "photo.jpg"), file_type::text);
}

TEST(classify_test, empty_and_short_heads) {
  EXPECT_EQ(classify("", ""), file_type::unknown);
  EXPECT_EQ(classify("", "noname"), file_type::unknown);
  EXPECT_EQ(classify("", ".bashrc"), file_type::unknown);
  EXPECT_EQ(classify("", "notes.txt"), file_type::text);
  EXPECT_EQ(classify("a", ""), file_type::text);
  EXPECT_EQ(classify("\n", ""), file_type::text);
  EXPECT_EQ(classify("\0"s, ""), file_type::other);
  EXPECT_EQ(classify("\xFF", ""), file_type::other);
  EXPECT_EQ(classify("\xFF\xD8\xFF", ""), file_type::jpeg);  // shortest JPEG signature
  EXPECT_EQ(classify("PK", ""), file_type::text);            // too short to be a zip, but ASCII
  EXPECT_EQ(classify("RIFF", ""), file_type::text);
}

TEST(classify_test, text_heuristic) {
  EXPECT_EQ(classify("#!/bin/sh\necho hi\n", "configure"), file_type::text);
  EXPECT_EQ(classify("Grüße, 世界, emoji 😀\n", ""), file_type::text);
  EXPECT_EQ(classify("\xEF\xBB\xBFwith a BOM\n", ""), file_type::text);
  EXPECT_EQ(classify("\x1B[31mred\x1B[0m log line\n", ""), file_type::text);
  // NULs, invalid UTF-8, overlong forms, surrogates, many control bytes.
  EXPECT_EQ(classify("text\0with nul"s, ""), file_type::other);
  EXPECT_EQ(classify("caf\xE9 au lait", ""), file_type::other);
  EXPECT_EQ(classify("overlong \xC0\xAF slash", ""), file_type::other);
  EXPECT_EQ(classify("surrogate \xED\xA0\x80 here", ""), file_type::other);
  EXPECT_EQ(classify(std::string(64, '\x01'), ""), file_type::other);
  // A multi-byte character cut off by the end of a full-length head is fine;
  // in a short head (the whole file) it is not.
  std::string full(k_classify_head_bytes - 1, 'x');
  full += "\xE4";
  EXPECT_EQ(classify(full, ""), file_type::text);
  EXPECT_EQ(classify("abc\xE4", ""), file_type::other);
  // Only the first k_classify_head_bytes count.
  EXPECT_EQ(classify(std::string(k_classify_head_bytes, 'x') + "\0\0\0"s, ""), file_type::text);
}

TEST(classify_test, utf16_text) {
  std::string le = "\xFF\xFE"s;
  for (const char c : std::string("hello, world\r\n")) le += std::string{c, '\0'};
  EXPECT_EQ(classify(le, ""), file_type::text);
  std::string be = "\xFE\xFF"s;
  for (const char c : std::string("hello, world\r\n")) be += std::string{'\0', c};
  EXPECT_EQ(classify(be, ""), file_type::text);
  EXPECT_EQ(classify(le, "page.xml"), file_type::document);
}

TEST(classify_test, markup_by_content) {
  EXPECT_EQ(classify("<?xml version=\"1.0\"?>\n<a/>\n", ""), file_type::document);
  EXPECT_EQ(classify("  <!DOCTYPE html>\n<html></html>", ""), file_type::document);
  EXPECT_EQ(classify("<svg xmlns=\"http://www.w3.org/2000/svg\"/>", ""), file_type::document);
  EXPECT_EQ(classify("<b>not a document start</b>", ""), file_type::text);
}

TEST(classify_test, starts_like_gzip) {
  EXPECT_TRUE(starts_like_gzip("\x1F\x8B\x08"));
  EXPECT_TRUE(starts_like_gzip("\x1F\x8B\x08\x00rest"));
  EXPECT_FALSE(starts_like_gzip("\x1F\x8B"));
  EXPECT_FALSE(starts_like_gzip("\x1F\x8B\x07"));
  EXPECT_FALSE(starts_like_gzip(""));
}

TEST(classify_test, starts_like_jpeg) {
  EXPECT_TRUE(starts_like_jpeg("\xFF\xD8\xFF"));
  EXPECT_TRUE(starts_like_jpeg("\xFF\xD8\xFF\xE0rest"));
  EXPECT_FALSE(starts_like_jpeg("\xFF\xD8"));
  EXPECT_FALSE(starts_like_jpeg(""));
  EXPECT_FALSE(starts_like_jpeg("\x89PNG"));
}

TEST(classify_test, type_names) {
  for (std::size_t i = 0; i < k_file_type_count; ++i) {
    const auto t = static_cast<file_type>(i);
    EXPECT_TRUE(is_known_file_type(static_cast<std::uint8_t>(i)));
    EXPECT_EQ(file_type_from_name(file_type_name(t)), t);
  }
  // The frozen numbers.
  EXPECT_EQ(static_cast<int>(file_type::jpeg), 2);
  EXPECT_EQ(static_cast<int>(file_type::executable), 10);
  EXPECT_EQ(static_cast<int>(file_type::gzip), 11);
  EXPECT_EQ(file_type_name(file_type::gzip), "gzip");
  EXPECT_EQ(static_cast<int>(file_type::zip), 12);
  EXPECT_EQ(file_type_name(file_type::zip), "zip");
  EXPECT_EQ(static_cast<int>(file_type::png), 13);
  EXPECT_EQ(file_type_name(file_type::png), "png");
  EXPECT_EQ(file_type_name(file_type::jpeg), "jpeg");
  EXPECT_EQ(file_type_name(file_type::document), "document");
  EXPECT_EQ(file_type_name(static_cast<file_type>(14)), "unknown(14)");
  EXPECT_EQ(file_type_name(static_cast<file_type>(255)), "unknown(255)");
  EXPECT_FALSE(is_known_file_type(14));
  EXPECT_FALSE(file_type_from_name("JPEG"));
  EXPECT_FALSE(file_type_from_name("unknown(14)"));
  EXPECT_FALSE(file_type_from_name(""));
}

TEST(classify_test, jpeg_corpus) {
  const std::filesystem::path dir = test::corpus_dir("jpeg");
  if (!std::filesystem::is_directory(dir)) DENSEFS_SKIP_UNLESS_REQUIRED(dir << " is missing");
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".jpg") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::string head(k_classify_head_bytes, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<std::size_t>(in.gcount()));
    EXPECT_EQ(classify(head, entry.path().filename().string()), file_type::jpeg) << entry.path();
    // The name plays no part.
    EXPECT_EQ(classify(head, "blob"), file_type::jpeg) << entry.path();
    ++files;
  }
  EXPECT_GT(files, 0);
}

}  // namespace
}  // namespace densefs::codec
