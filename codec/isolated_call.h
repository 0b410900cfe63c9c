// Private to codec/: runs an encoder that may crash on some inputs in a
// child process, so that its crash costs only that encoding, never the
// mount. libjxl's encoder (png_rows.cpp) stops the process with an
// illegal instruction on some images (JXL_CHECK/JXL_ASSERT; libjxl 0.7 at
// effort 8 and 9 on images of a few pixels, issue 3890 of libjxl upstream
// on later versions), and a file system cannot let a user's file do that.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace densefs::codec::detail {

// Calls `encode` in a forked child and returns what it returned, or
// nothing when it returned nothing, threw, crashed, or ran past
// `cpu_limit` of CPU time. The child runs only `encode` (no other thread
// of the parent exists in it) and leaves with _exit, so nothing of the
// parent's state is flushed or torn down twice. Costs a fork (about a
// millisecond per 100 MB of the parent's mapped memory): for encoders
// that take tens of milliseconds or more.
std::optional<std::string> call_isolated(const std::function<std::optional<std::string>()>& encode,
                                         std::chrono::seconds cpu_limit);

}  // namespace densefs::codec::detail
