// oversub-options: the options reference, printed from the OVERSUB_OPTIONS table
// (common/options.h) so that no copy of it can drift from the parser.
//
//   oversub-options              the reference as plain text, for a terminal
//   oversub-options --markdown   a Markdown table: the block README.md and the user
//                                guides hold between the GENERATED OPTIONS markers
//                                (scripts/update-options-doc rewrites it, and the
//                                options_doc test fails when a block differs)
//
// scripts/oversub options runs it.
#include <cstdio>
#include <string>
#include <string_view>

#include "common/options.h"

namespace {

// A table cell: '|' would end the cell, so it is escaped; an empty default reads "unset".
std::string cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string markdown() {
  std::string out =
      "| Variable | Default | Accepted values | What it does |\n"
      "|---|---|---|---|\n";
  for (const oversub::option_info& o : oversub::option_table()) {
    out += "| `" + std::string(o.name) + "` | ";
    out += o.default_value.empty() ? std::string("unset") : "`" + std::string(o.default_value) + "`";
    out += " | " + cell(o.accepted) + " | " + cell(o.doc) + " |\n";
  }
  return out;
}

// text folded at width columns, each line starting with indent.
std::string fold(std::string_view text, std::string_view indent, std::size_t width) {
  std::string out;
  std::string line(indent);
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view word = text.substr(start, end - start);
    if (line.size() > indent.size() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = std::string(indent);
    }
    if (line.size() > indent.size()) line += ' ';
    line += word;
    start = end + 1;
  }
  if (line.size() > indent.size()) out += line + "\n";
  return out;
}

std::string plain() {
  std::string out;
  for (const oversub::option_info& o : oversub::option_table()) {
    out += std::string(o.name) + " (default: " +
           (o.default_value.empty() ? std::string("unset") : std::string(o.default_value)) +
           ")\n";
    out += fold(std::string("accepted: ") + std::string(o.accepted), "    ", 88);
    out += fold(o.doc, "    ", 88);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bool md = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--markdown") {
      md = true;
    } else {
      std::fprintf(stderr, "usage: %s [--markdown]\n", argv[0]);
      return 2;
    }
  }
  const std::string text = md ? markdown() : plain();
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}
