#include "verbose.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include <oneapi/dnnl/dnnl.h>

namespace graphfuse::onednn {
namespace {

// The verbose level the user set: oneDNN takes ONEDNN_VERBOSE (or the older
// DNNL_VERBOSE) as a level number or as named modes. -1: named modes, which
// dnnl_set_verbose cannot restore, so the level is left as the user set it.
int user_level() {
  static const int level = [] {
    const char* text = std::getenv("ONEDNN_VERBOSE");
    if (!text || !*text) text = std::getenv("DNNL_VERBOSE");
    if (!text || !*text) return 0;
    char* end = nullptr;
    long value = std::strtol(text, &end, 10);
    return *end == '\0' ? static_cast<int>(value) : -1;
  }();
  return level;
}

// Level 2: primitives and partitions at creation as well as at execution.
constexpr int kCreation = 2;

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// A creation line: onednn_verbose,[timestamp,]v1,primitive,create:<cache>,cpu,<kind>,<impl>,...
bool parse_created(const std::string& line, Created& out) {
  std::vector<std::string> fields;
  std::stringstream in(line);
  for (std::string field; std::getline(in, field, ',');) fields.push_back(field);
  for (size_t i = 1; i + 4 < fields.size(); ++i)
    if (fields[i] == "primitive" && fields[i + 1].rfind("create", 0) == 0) {
      out = {fields[i + 3], fields[i + 4]};
      return true;
    }
  return false;
}

}  // namespace

std::vector<Created> primitives_created(const std::function<void()>& fn) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::fflush(stdout);
  int capture = ::memfd_create("graphfuse_onednn_verbose", MFD_CLOEXEC);
  int saved = capture < 0 ? -1 : ::dup(STDOUT_FILENO);
  if (saved < 0 || ::dup2(capture, STDOUT_FILENO) < 0) {
    // No capture: nothing is known of the implementations, nothing refused.
    if (saved >= 0) ::close(saved);
    if (capture >= 0) ::close(capture);
    fn();
    return {};
  }
  const int restore = user_level();
  if (restore >= 0) dnnl_set_verbose(kCreation);
  auto finish = [&] {
    if (restore >= 0) dnnl_set_verbose(restore);
    std::fflush(stdout);
    ::dup2(saved, STDOUT_FILENO);
    ::close(saved);
  };
  try {
    fn();
  } catch (...) {
    finish();
    ::close(capture);
    throw;
  }
  finish();

  std::string text;
  char buffer[1 << 14];
  ::lseek(capture, 0, SEEK_SET);
  for (ssize_t n; (n = ::read(capture, buffer, sizeof(buffer))) > 0;) text.append(buffer, n);
  ::close(capture);

  std::vector<Created> created;
  std::string passed;
  std::stringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    bool ours = line.rfind("onednn_verbose,", 0) == 0;
    Created c;
    if (ours && parse_created(line, c)) created.push_back(std::move(c));
    if (!ours || restore != 0) passed += line + "\n";
  }
  write_all(STDOUT_FILENO, passed);
  return created;
}

}  // namespace graphfuse::onednn
