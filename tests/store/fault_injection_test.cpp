// The test-only fault spec (DENSEFS_FAULT_INJECTION) is parsed strictly: a
// typo must not silently turn the faults off.
#include "store/metadata/fault_injection.h"

#include <gtest/gtest.h>

#include <cerrno>

#include "store/error.h"

namespace densefs::store {
namespace {

TEST(fault_spec, parses_every_key) {
  const fault_spec s = parse_fault_spec("write_eio:files=wal:after=7:count=3:p=0.25:seed=9");
  EXPECT_EQ(s.what, fault_spec::kind::write_eio);
  EXPECT_EQ(s.which, fault_spec::files::wal);
  EXPECT_EQ(s.after, 7u);
  EXPECT_EQ(s.count, 3u);
  EXPECT_DOUBLE_EQ(s.probability, 0.25);
  EXPECT_EQ(s.seed, 9u);

  const fault_spec d = parse_fault_spec("read_eio");
  EXPECT_EQ(d.what, fault_spec::kind::read_eio);
  EXPECT_EQ(d.which, fault_spec::files::all);
  EXPECT_EQ(d.after, 0u);
  EXPECT_DOUBLE_EQ(d.probability, 1.0);
  EXPECT_EQ(parse_fault_spec("read_eio:files=blob").which, fault_spec::files::blob);
  EXPECT_EQ(parse_fault_spec("read_eio:files=sst").which, fault_spec::files::sst);

  const fault_spec stall = parse_fault_spec("write_stall:files=wal:while=/tmp/flag");
  EXPECT_EQ(stall.what, fault_spec::kind::write_stall);
  EXPECT_EQ(stall.while_exists, "/tmp/flag");
}

TEST(fault_spec, rejects_anything_else) {
  for (const char* bad : {"",
                          "eio",
                          "read_eio:",
                          "read_eio:after",
                          "read_eio:after=",
                          "read_eio:after=-1",
                          "read_eio:after=1x",
                          "read_eio:count=1:count=2",
                          "read_eio:files=blobs",
                          "read_eio:p=0",
                          "read_eio:p=1.01",
                          "read_eio:p=abc",
                          "read_eio:seed=",
                          "read_eio:what=1",
                          "READ_EIO",
                          "read_eio:files=blob:",
                          "write_stall",
                          "write_stall:while=",
                          "write_stall:while=flag",
                          "write_eio:while=/tmp/flag"}) {
    try {
      parse_fault_spec(bad);
      ADD_FAILURE() << "\"" << bad << "\" was accepted";
    } catch (const store_error& e) {
      EXPECT_EQ(e.error_number(), EINVAL) << bad;
      EXPECT_NE(std::string(e.what()).find("DENSEFS_FAULT_INJECTION"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace densefs::store
