// options.h: simtrain's command line. Each option is declared once in a table
// (name, value form, help); `--name value` and `--name=value` are both accepted,
// --help prints the table, and a malformed or unknown option stops the program with
// status 2 and a message naming it.
#ifndef SIMTRAIN_OPTIONS_H
#define SIMTRAIN_OPTIONS_H

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "gpu_compat.h"

struct options {
  int depth = 8;     // hidden layers of width x width
  int width = 128;   // features per hidden layer
  int batch = 64;    // rows per iteration
  int iters = 5;
  std::uint64_t seed = 1;
  float lr = 1e-3f;  // Adam learning rate
  bool caching = false;     // a caching allocator (segments or expandable)
  bool expandable = false;  // --caching expandable: segments the program maps itself
  bool async_pool = false;  // --caching async: cudaMallocAsync/cudaFreeAsync per tensor
  bool graphs = false;      // the step captured once and replayed as a CUDA graph
  int graph_layers = 0;     // --graphs: a new graph every N layers of each pass (0: one graph)
  bool pointer_arrays = false;  // Adam: one kernel chasing a device array of pointers
  bool foreach = false;     // Adam: one kernel over a >4 KiB tensor list by value
  int streams = 1;
  gpu::launch_path launch = gpu::launch_path::nvcc;
  gpu::api_path api = gpu::api_path::runtime;
  std::string trace_allocs;  // empty: no allocation trace
  int log_every = 0;  // 0: no logging step; N: after every Nth iteration, the weights' sum
};

namespace options_detail {

enum class kind { integer, unsigned64, real, flag, caching, streams, launch, api, path };

using int_field = int options::*;
using bool_field = bool options::*;

struct spec {
  const char* name;
  const char* value;  // how the value is written in --help; nullptr for a flag
  const char* help;
  kind type;
  int_field field = nullptr;  // for kind::integer
  long min = 0;
  long max = 0;
  bool_field flag = nullptr;  // for kind::flag
};

inline constexpr spec kSpecs[] = {
    {"depth", "N", "hidden layers (residual add every 2 layers)", kind::integer,
     &options::depth, 1, 4096},
    {"width", "N", "features per hidden layer", kind::integer, &options::width, 1, 65536},
    {"batch", "N", "rows per iteration", kind::integer, &options::batch, 1, 65536},
    {"iters", "N", "training iterations", kind::integer, &options::iters, 1, 1000000},
    {"seed", "N", "seed of the weights and of the synthetic data", kind::unsigned64},
    {"lr", "X", "Adam learning rate", kind::real},
    {"caching", "[segments|expandable|async]",
     "sub-allocate from cached segments (like PyTorch's allocator); expandable: from "
     "segments the program reserves and maps itself (cuMemAddressReserve/cuMemCreate/"
     "cuMemMap, PyTorch's expandable_segments:True); async: a cudaMallocAsync and "
     "cudaFreeAsync per tensor, CUDA's pool caching (PyTorch's backend:cudaMallocAsync)",
     kind::caching},
    {"graphs", nullptr,
     "capture the step once on a non-default stream (allocating from a private pool) "
     "and replay it with cudaGraphLaunch each iteration",
     kind::flag, nullptr, 0, 0, &options::graphs},
    {"graph-layers", "N",
     "with --graphs: end the graph and capture the next every N layers of the forward "
     "and of the backward pass, as torch.compile splits a model into several graphs "
     "(0: the whole step is one graph; --streams 1 only)",
     kind::integer, &options::graph_layers, 0, 1000000},
    {"pointer-arrays", nullptr,
     "Adam as one kernel per step reading a device array of pointers to the parameter, "
     "gradient and moment buffers",
     kind::flag, nullptr, 0, 0, &options::pointer_arrays},
    {"foreach", nullptr,
     "Adam as one kernel per step over a tensor list passed by value (a parameter "
     "block over 4 KiB, like multi_tensor_apply)",
     kind::flag, nullptr, 0, 0, &options::foreach},
    {"streams", "1|2", "2: upload and optimizer updates on a second stream",
     kind::streams},
    {"launch", "nvcc|runtime|ex",
     "launch path: __cudaLaunchKernel, cudaLaunchKernel, cudaLaunchKernelExC",
     kind::launch},
    {"api", "runtime|driver|dlsym",
     "device memory, copies, memsets and launches through the runtime, or the driver "
     "(cuGetProcAddress, or dlsym on libcuda)",
     kind::api},
    {"log-every", "N",
     "after every Nth iteration, sum each layer's parameters and print the total (a "
     "training script's logging step: launches the other iterations do not have)",
     kind::integer, &options::log_every, 0, 1000000},
    {"trace-allocs", "PATH",
     "write every cudaMalloc/cudaFree to PATH (docs/trace-format.md)", kind::path},
};

[[noreturn]] inline void usage_error(const char* prog, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n(try %s --help)\n", prog, message.c_str(), prog);
  std::exit(2);
}

inline void print_help(const char* prog) {
  std::printf(
      "usage: %s [options]\n\n"
      "A small deterministic trainer on the CUDA runtime API: a deep stack of fully\n"
      "connected layers with ReLU and skip connections, MSE loss against a synthetic\n"
      "target, full backward pass and Adam. Prints the loss of every iteration (with\n"
      "its bits, for bit-exact comparison), the peak device bytes it held and the\n"
      "final loss. Exits 1 with a one-line message on any CUDA error.\n\noptions:\n",
      prog);
  const options defaults;
  for (const spec& s : kSpecs) {
    std::string left = std::string("--") + s.name;
    if (s.value != nullptr) left += std::string(" ") + s.value;
    std::printf("  %-26s %s", left.c_str(), s.help);
    switch (s.type) {
      case kind::integer: std::printf(" (default %d)", defaults.*s.field); break;
      case kind::unsigned64:
        std::printf(" (default %llu)", static_cast<unsigned long long>(defaults.seed));
        break;
      case kind::real: std::printf(" (default %g)", static_cast<double>(defaults.lr)); break;
      case kind::streams: std::printf(" (default %d)", defaults.streams); break;
      case kind::launch:
        std::printf(" (default %s)", gpu::launch_path_name(defaults.launch));
        break;
      case kind::api: std::printf(" (default %s)", gpu::api_path_name(defaults.api)); break;
      case kind::caching: std::printf(" (default off; segments when given alone)"); break;
      case kind::flag:
      case kind::path: break;
    }
    std::printf("\n");
  }
  std::printf("  %-26s %s\n", "-h, --help", "show this help and exit");
}

inline void apply(const char* prog, const spec& s, const char* text, options& out) {
  std::string bad = std::string("--") + s.name + ": invalid value '" + text + "'";
  char* end = nullptr;
  errno = 0;
  switch (s.type) {
    case kind::integer: {
      long v = std::strtol(text, &end, 10);
      if (*text == '\0' || *end != '\0' || errno != 0 || v < s.min || v > s.max) {
        usage_error(prog, bad + " (an integer from " + std::to_string(s.min) + " to " +
                              std::to_string(s.max) + ")");
      }
      out.*s.field = static_cast<int>(v);
      break;
    }
    case kind::unsigned64: {
      unsigned long long v = std::strtoull(text, &end, 10);
      if (*text == '\0' || *text == '-' || *end != '\0' || errno != 0) {
        usage_error(prog, bad + " (an unsigned integer)");
      }
      out.seed = v;
      break;
    }
    case kind::real: {
      float v = std::strtof(text, &end);
      if (*text == '\0' || *end != '\0' || errno != 0 || !(v > 0.0f)) {
        usage_error(prog, bad + " (a positive number)");
      }
      out.lr = v;
      break;
    }
    case kind::flag:
      out.*s.flag = true;
      break;
    case kind::caching: {
      std::string_view v = text;
      if (v != "" && v != "segments" && v != "expandable" && v != "async") {
        usage_error(prog, bad + " (segments, expandable or async)");
      }
      out.caching = true;
      out.expandable = v == "expandable";
      out.async_pool = v == "async";
      break;
    }
    case kind::streams: {
      std::string_view v = text;
      if (v != "1" && v != "2") usage_error(prog, bad + " (1 or 2)");
      out.streams = v == "1" ? 1 : 2;
      break;
    }
    case kind::launch: {
      std::string_view v = text;
      if (v == "nvcc") {
        out.launch = gpu::launch_path::nvcc;
      } else if (v == "runtime") {
        out.launch = gpu::launch_path::runtime;
      } else if (v == "ex") {
        out.launch = gpu::launch_path::ex;
      } else {
        usage_error(prog, bad + " (nvcc, runtime or ex)");
      }
      break;
    }
    case kind::api: {
      std::string_view v = text;
      if (v == "runtime") {
        out.api = gpu::api_path::runtime;
      } else if (v == "driver") {
        out.api = gpu::api_path::driver;
      } else if (v == "dlsym") {
        out.api = gpu::api_path::dlsym;
      } else {
        usage_error(prog, bad + " (runtime, driver or dlsym)");
      }
      break;
    }
    case kind::path:
      if (*text == '\0') usage_error(prog, bad + " (a file path)");
      out.trace_allocs = text;
      break;
  }
}

}  // namespace options_detail

// Parses argv; prints help and exits 0 on --help, exits 2 on a bad command line.
inline options parse_options(int argc, char** argv) {
  using namespace options_detail;
  const char* prog = argc > 0 ? argv[0] : "simtrain";
  options out;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      print_help(prog);
      std::exit(0);
    }
    if (arg.substr(0, 2) != "--") usage_error(prog, "unexpected argument '" + std::string(arg) + "'");
    std::string_view body = arg.substr(2);
    std::size_t eq = body.find('=');
    std::string_view name = body.substr(0, eq);
    const spec* found = nullptr;
    for (const spec& s : kSpecs) {
      if (name == s.name) found = &s;
    }
    if (found == nullptr) usage_error(prog, "unknown option '--" + std::string(name) + "'");
    if (found->type == kind::caching) {
      // An optional value: --caching, --caching=expandable, --caching expandable.
      std::string value;
      if (eq != std::string_view::npos) {
        value = std::string(body.substr(eq + 1));
        if (value.empty()) {
          usage_error(prog, "--caching= needs a value (segments, expandable or async)");
        }
      } else if (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0) {
        value = argv[++i];
      }
      apply(prog, *found, value.c_str(), out);
      continue;
    }
    if (found->value == nullptr) {
      if (eq != std::string_view::npos) {
        usage_error(prog, "--" + std::string(name) + " takes no value");
      }
      apply(prog, *found, "", out);
      continue;
    }
    std::string value;
    if (eq != std::string_view::npos) {
      value = std::string(body.substr(eq + 1));
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      usage_error(prog, "--" + std::string(name) + " needs a value (" + found->value + ")");
    }
    apply(prog, *found, value.c_str(), out);
  }
  if (out.graph_layers != 0 && (!out.graphs || out.streams != 1)) {
    usage_error(prog, "--graph-layers needs --graphs and --streams 1");
  }
  if (out.pointer_arrays && out.foreach) {
    usage_error(prog, "--pointer-arrays and --foreach are two ways of one Adam step: pick one");
  }
  const long long w = out.width;
  if (w * w + w > INT_MAX || w * out.batch > INT_MAX) {
    usage_error(prog, "--width and --batch too large: kernels index width*width and "
                      "batch*width elements with int");
  }
  return out;
}

#endif  // SIMTRAIN_OPTIONS_H
