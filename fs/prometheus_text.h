// The Prometheus text exposition format (version 0.0.4), written: what
// `-o metrics=` serves (fs/metrics_server.h, docs/metrics.md). Each family
// gets its HELP and TYPE lines once, before its first sample, and label
// values are escaped as the format asks (backslash, double quote, newline),
// so a codec or host name can never break a line.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace densefs::fs {

class prometheus_text {
 public:
  using label = std::pair<std::string_view, std::string_view>;

  // Starts a family: `type` is counter, gauge or histogram.
  void family(std::string_view name, std::string_view type, std::string_view help);
  // One sample of the current family (a histogram's name carries its
  // _bucket, _sum or _count suffix).
  void sample(std::string_view name, double value, std::initializer_list<label> labels = {});
  void sample(std::string_view name, std::uint64_t value, std::initializer_list<label> labels = {});
  // A family of one sample without labels.
  template <class Value>
  void single(std::string_view name, std::string_view type, std::string_view help, Value value) {
    family(name, type, help);
    sample(name, value);
  }
  // A histogram's `le` label holds a number: formatted as the format does.
  static std::string bound(double seconds);

  const std::string& text() const { return out_; }

 private:
  void start_sample(std::string_view name, std::initializer_list<label> labels);
  std::string out_;
};

}  // namespace densefs::fs
