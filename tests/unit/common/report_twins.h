// The exit report's two forms read back and compared (stats_test, report_test): every
// field of the text has its twin in the JSON with the same value, and every member of
// the JSON is printed in the text. The text is taken as a user reads it: lines of
// "label value" fields, a value in the unit it shows (1.50 MiB, 2000 ns, 8.011 ms,
// 25.000 GB/s, yes/no, 24 entries); the JSON is parsed on its own. Neither side is
// read through common/stats.h's field list, so a field written to one form only, or
// with another value, fails.
#ifndef OVERSUB_TESTS_UNIT_COMMON_REPORT_TWINS_H
#define OVERSUB_TESTS_UNIT_COMMON_REPORT_TWINS_H

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "common/units.h"

namespace oversub::stats::testing {

// A JSON value: numbers keep the text they were written with.
struct json_value {
  enum class type { object, array, string, number, boolean } kind = type::object;
  std::string text;  // string, number; boolean: true / false
  std::vector<std::pair<std::string, std::unique_ptr<json_value>>> members;  // object
  std::vector<std::unique_ptr<json_value>> items;                            // array
  bool printed = false;  // the text showed it

  json_value* member(std::string_view key) {
    for (auto& [k, v] : members) {
      if (k == key) return v.get();
    }
    return nullptr;
  }
};

class json_reader {
 public:
  explicit json_reader(std::string_view s) : s_(s) {}
  // Null, error set, when s is not one JSON value and a newline.
  std::unique_ptr<json_value> parse(std::string& error) {
    std::unique_ptr<json_value> v = value();
    if (v && s_.substr(i_) != "\n") fail("trailing text");
    if (!error_.empty()) {
      error = error_;
      return nullptr;
    }
    return v;
  }

 private:
  void fail(const std::string& what) {
    if (error_.empty()) error_ = fmt::format("{} at offset {}", what, i_);
  }
  bool eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  std::string string() {
    std::string out;
    if (!eat('"')) fail("expected a string");
    while (error_.empty() && i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\' && i_ + 1 < s_.size()) ++i_;
      out += s_[i_++];
    }
    if (!eat('"')) fail("unterminated string");
    return out;
  }
  std::unique_ptr<json_value> value() {
    auto v = std::make_unique<json_value>();
    if (!error_.empty() || i_ >= s_.size()) {
      fail("expected a value");
      return v;
    }
    const char c = s_[i_];
    if (eat('{')) {
      v->kind = json_value::type::object;
      if (eat('}')) return v;
      do {
        std::string key = string();
        if (!eat(':')) fail("expected ':'");
        v->members.emplace_back(std::move(key), value());
      } while (error_.empty() && eat(','));
      if (!eat('}')) fail("expected '}'");
    } else if (eat('[')) {
      v->kind = json_value::type::array;
      if (eat(']')) return v;
      do {
        v->items.push_back(value());
      } while (error_.empty() && eat(','));
      if (!eat(']')) fail("expected ']'");
    } else if (c == '"') {
      v->kind = json_value::type::string;
      v->text = string();
    } else if (s_.substr(i_, 4) == "true" || s_.substr(i_, 5) == "false") {
      v->kind = json_value::type::boolean;
      v->text = c == 't' ? "true" : "false";
      i_ += v->text.size();
    } else {
      v->kind = json_value::type::number;
      while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) ||
                                s_[i_] == '.' || s_[i_] == '-')) {
        v->text += s_[i_++];
      }
      if (v->text.empty()) fail("expected a value");
    }
    return v;
  }

  std::string_view s_;
  std::size_t i_ = 0;
  std::string error_;
};

// Whether a field's text value shows the JSON value v.
inline bool same_value(std::string_view text, const json_value& v) {
  switch (v.kind) {
    case json_value::type::boolean: return text == (v.text == "true" ? "yes" : "no");
    case json_value::type::array:
      return text == fmt::format("{} {}", v.items.size(), v.items.size() == 1 ? "entry" : "entries");
    case json_value::type::string:
      // OVERSUB_DEVICE_LIMIT: "1073741824" is 1.00 GiB, "0.75" 0.75 of the device.
      if (text == v.text || text == v.text + " of the device") return true;
      return !v.text.empty() && v.text.find_first_not_of("0123456789") == std::string::npos &&
             text == format_bytes(std::stoull(v.text));
    case json_value::type::number: {
      if (text == v.text || text == v.text + " GB/s") return true;
      if (v.text.find_first_not_of("0123456789") != std::string::npos) return false;
      const std::uint64_t n = std::stoull(v.text);
      if (text == format_bytes(n) || text == fmt::format("{} ns", n)) return true;
      return text == fmt::format("{:.3f} ms", static_cast<double>(n) / 1e6) && n >= 1000000;
    }
    case json_value::type::object: return false;
  }
  return false;
}

// The text label of a JSON key: '_' read as ' ', less a unit suffix (_bytes, _ns, _gbps).
inline std::string label_for(std::string_view key) {
  for (std::string_view unit : {"_bytes", "_ns", "_gbps"}) {
    if (key.size() > unit.size() && key.ends_with(unit)) {
      key.remove_suffix(unit.size());
      break;
    }
  }
  std::string out(key);
  for (char& c : out) {
    if (c == '_') c = ' ';
  }
  return out;
}

inline std::vector<std::string> split(std::string_view s, std::string_view by) {
  std::vector<std::string> out;
  while (true) {
    const std::size_t at = s.find(by);
    out.emplace_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + by.size());
  }
}

// What is wrong, one problem a line; empty when the text and the JSON are twins.
// fields counts the text's fields checked.
inline std::vector<std::string> twin_problems(const std::string& text, const std::string& json,
                                              std::size_t* fields = nullptr) {
  std::vector<std::string> problems;
  std::string error;
  std::unique_ptr<json_value> root = json_reader(json).parse(error);
  if (!root) return {"JSON does not parse: " + error + ": " + json};
  if (json_value* marker = root->member("oversub_stats")) marker->printed = true;
  std::size_t checked = 0;
  json_value* device = nullptr;  // the pool device the last "pool device N" line named
  auto at = [&](std::initializer_list<std::string> path) -> json_value* {
    json_value* v = root.get();
    for (const std::string& key : path) {
      v = v == nullptr ? nullptr : v->member(key);
    }
    return v;
  };
  for (const std::string& line : split(text, "\n")) {
    if (line.empty()) continue;
    json_value* object = nullptr;
    std::vector<std::string> segments;
    constexpr std::string_view header = "oversub: stats (";
    constexpr std::string_view indent = "oversub:   ";
    if (line.starts_with(header) && line.ends_with(")")) {
      object = root.get();
      segments = split(std::string_view(line).substr(header.size(),
                                                     line.size() - header.size() - 1),
                       ", ");
    } else if (line.starts_with(indent) && line.find(": ", indent.size()) != std::string::npos) {
      const std::size_t colon = line.find(": ", indent.size());
      const std::string title = line.substr(indent.size(), colon - indent.size());
      segments = split(std::string_view(line).substr(colon + 2), "  ");
      unsigned n = 0;
      if (title == "calls" || title == "schedule") {
        object = at({title});
      } else if (title == "time in calls") {
        object = at({"call_ns"});
      } else if (std::sscanf(title.c_str(), "pool device %u", &n) == 1) {
        device = object = at({"pool", fmt::format("device{}", n)});
      } else if (std::sscanf(title.c_str(), "swap device %u", &n) == 1) {
        object = at({"pool", fmt::format("device{}", n), "swap"});
      } else if (std::sscanf(title.c_str(), "um device %u", &n) == 1) {
        object = at({"pool", fmt::format("device{}", n), "um"});
      } else if (title == "pool planned" && device != nullptr) {
        object = device->member("planned");
      }
    } else if (line.starts_with(indent)) {
      // A counter: "oversub:   <name> <value>" (an event's total) or
      // "oversub:   <name> current <v>  peak <v>  total <v>" (a gauge).
      const std::string rest = line.substr(indent.size());
      const std::size_t space = rest.find(' ');
      object = at({"counters", rest.substr(0, space)});
      const std::size_t start = rest.find_first_not_of(' ', space);
      if (start != std::string::npos) {
        segments = split(std::string_view(rest).substr(start), "  ");
        if (object != nullptr && segments.size() == 1 && object->members.size() == 1) {
          segments[0] = "total " + segments[0];
        }
      }
    }
    if (object == nullptr || object->kind != json_value::type::object) {
      problems.push_back("no JSON object for the text line: " + line);
      continue;
    }
    for (const std::string& segment : segments) {
      // The member whose label (or whose key, for names such as __cudaLaunchKernel)
      // begins the segment; the longest such.
      json_value* twin = nullptr;
      std::size_t label_size = 0;
      for (auto& [key, v] : object->members) {
        for (const std::string& label : {label_for(key), key}) {
          if (label.size() > label_size && segment.size() > label.size() &&
              segment.starts_with(label) && segment[label.size()] == ' ') {
            twin = v.get();
            label_size = label.size();
          }
        }
      }
      if (twin == nullptr) {
        problems.push_back(fmt::format("'{}' has no JSON twin (line: {})", segment, line));
        continue;
      }
      const std::string value = segment.substr(label_size + 1);
      if (!same_value(value, *twin)) {
        problems.push_back(fmt::format("'{}' but the JSON says {} (line: {})", segment,
                                       twin->text.empty() ? "an object" : twin->text, line));
      }
      twin->printed = true;
      ++checked;
    }
  }
  // The other way: every JSON member that is not an object was printed.
  auto walk = [&](auto& self, const json_value& v, const std::string& path) -> void {
    for (const auto& [key, m] : v.members) {
      if (m->kind == json_value::type::object) {
        self(self, *m, path + "." + key);
      } else if (!m->printed) {
        problems.push_back(fmt::format("JSON {}.{} is not in the text", path, key));
      }
    }
  };
  walk(walk, *root, "");
  if (fields != nullptr) *fields = checked;
  return problems;
}

}  // namespace oversub::stats::testing

#endif  // OVERSUB_TESTS_UNIT_COMMON_REPORT_TWINS_H
