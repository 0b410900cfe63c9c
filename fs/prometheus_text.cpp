#include "fs/prometheus_text.h"

#include <charconv>
#include <cmath>

namespace densefs::fs {

namespace {

// HELP text escapes backslash and newline; label values also the quote.
void append_escaped(std::string& out, std::string_view text, bool quote) {
  for (const char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

std::string format_double(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace

void prometheus_text::family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  append_escaped(out_, help, false);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

void prometheus_text::start_sample(std::string_view name, std::initializer_list<label> labels) {
  out_ += name;
  if (labels.size() != 0) {
    out_ += '{';
    bool first = true;
    for (const auto& [key, value] : labels) {
      if (!first) out_ += ',';
      first = false;
      out_ += key;
      out_ += "=\"";
      append_escaped(out_, value, true);
      out_ += '"';
    }
    out_ += '}';
  }
  out_ += ' ';
}

void prometheus_text::sample(std::string_view name, double value,
                             std::initializer_list<label> labels) {
  start_sample(name, labels);
  out_ += format_double(value);
  out_ += '\n';
}

void prometheus_text::sample(std::string_view name, std::uint64_t value,
                             std::initializer_list<label> labels) {
  start_sample(name, labels);
  out_ += std::to_string(value);
  out_ += '\n';
}

std::string prometheus_text::bound(double seconds) {
  return format_double(seconds);
}

}  // namespace densefs::fs
