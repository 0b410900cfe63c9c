// Bytes as text (store/text.h): the exact forms other programs read back
// (SigV4 signatures, libpq URIs, PostgreSQL's decode(..., 'hex')) and names
// that cannot break a log line.
#include "store/text.h"

#include <gtest/gtest.h>

#include <string>

namespace densefs::store {
namespace {

TEST(text, hex_is_two_lower_case_digits_a_byte) {
  EXPECT_EQ(to_hex(""), "");
  EXPECT_EQ(to_hex(std::string("\x00\x01\x7f\x80\xff", 5)), "00017f80ff");
  std::string out = "x";
  append_hex(out, 0xab);
  append_hex(out, 0x0c, true);
  EXPECT_EQ(out, "xab0C");
  EXPECT_EQ(hex_digit(10), 'a');
  EXPECT_EQ(hex_digit(10, true), 'A');
}

TEST(text, percent_encoding_keeps_only_unreserved_characters) {
  EXPECT_EQ(percent_encode("AZaz09-_.~"), "AZaz09-_.~");
  EXPECT_EQ(percent_encode("/run/postgresql"), "%2Frun%2Fpostgresql");
  EXPECT_EQ(percent_encode("a b/c", true), "a%20b/c");
  EXPECT_EQ(percent_encode(std::string("\xff\x00=", 3)), "%FF%00%3D");
}

TEST(text, escaped_names_are_printable_ascii) {
  EXPECT_EQ(escape_bytes("plain name.txt"), "plain name.txt");
  EXPECT_EQ(escape_bytes(std::string("a\nb\x00\xe9", 5)), "a\\x0ab\\x00\\xe9");
  EXPECT_EQ(escape_bytes("back\\slash"), "back\\x5cslash");
  EXPECT_EQ(escape_bytes("say \"hi\"", "\"\\"), "say \\x22hi\\x22");
}

}  // namespace
}  // namespace densefs::store
