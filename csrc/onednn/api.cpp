// Why this unit exists: torch carries oneDNN (with its Graph API) inside
// libtorch_cpu.so and installs the matching headers under
// torch/include/oneapi/dnnl, but exports none of its C functions. They are
// local symbols, listed only in the library file's ELF symbol table
// (.symtab), which the dynamic linker never reads. Linking a second oneDNN
// instead means a second thread pool, a second copy of the process-wide state
// (constant-tensor and primitive caches, ISA limit, verbose) and another
// version's kernels beside torch's. So the plugin calls torch's copy: each
// function's address is libtorch_cpu.so's load address plus its value in the
// file's .symtab.
//
// Every C function the headers declare (dnnl_api.inc, written by gen_api.py
// at build time) is defined here as a hidden stub that jumps through one slot
// of a table, so the header-only C++ API (dnnl_graph.hpp) works unchanged and
// no signature is repeated. A slot starts at a stand-in that returns
// dnnl_unimplemented (or 0), and keeps it for a function torch lacks.
//
// Nothing is trusted before it is checked: the file read is the object loaded
// (same GNU build id), an exported function's address through dlsym is the
// file's value plus the load address, each address lies in an executable
// segment of the loaded library, and dnnl_version() equals the headers'
// version and hash. Any failure leaves every slot at its stand-in and says
// why: the plugin then runs models unfused.
#include "api.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_version.h>
#include <oneapi/dnnl/dnnl_version_hash.h>

#if !defined(__x86_64__) || !defined(__linux__)
#error "torch_graphfuse resolves torch's oneDNN on x86-64 Linux only"
#endif

extern "C" {
__attribute__((visibility("hidden"))) dnnl_status_t graphfuse_dnnl_missing_status() {
  return dnnl_unimplemented;
}
__attribute__((visibility("hidden"))) intptr_t graphfuse_dnnl_missing_value() { return 0; }

#define GRAPHFUSE_DNNL_FUNCTION(index, name, status, required)             \
  reinterpret_cast<void*>(status ? reinterpret_cast<uintptr_t>(&graphfuse_dnnl_missing_status) \
                                 : reinterpret_cast<uintptr_t>(&graphfuse_dnnl_missing_value)),
__attribute__((visibility("hidden"))) void* graphfuse_dnnl_slots[] = {
#include "dnnl_api.inc"
};
#undef GRAPHFUSE_DNNL_FUNCTION
}

// endbr64 keeps the stubs valid targets of indirect calls (the C++ API passes
// destroy functions around) where indirect-branch tracking is on; elsewhere it
// is a no-op.
#define GRAPHFUSE_DNNL_FUNCTION(index, name, status, required) \
  asm(".text\n"                                                 \
      ".globl " #name "\n"                                      \
      ".hidden " #name "\n"                                     \
      ".type " #name ", @function\n"                            \
      ".p2align 4\n" #name ":\n"                                \
      "  endbr64\n"                                             \
      "  jmp *graphfuse_dnnl_slots+8*" #index "(%rip)\n"        \
      ".size " #name ", .-" #name "\n");
#include "dnnl_api.inc"
#undef GRAPHFUSE_DNNL_FUNCTION

namespace graphfuse::onednn {
namespace {

struct Function {
  const char* name;
  bool required;
};

#define GRAPHFUSE_DNNL_FUNCTION(index, name, status, required) {#name, required != 0},
constexpr Function kFunctions[] = {
#include "dnnl_api.inc"
};
#undef GRAPHFUSE_DNNL_FUNCTION
constexpr size_t kCount = sizeof(kFunctions) / sizeof(kFunctions[0]);
static_assert(sizeof(graphfuse_dnnl_slots) / sizeof(void*) == kCount);

constexpr std::string_view kLibrary = "libtorch_cpu.so";

// libtorch_cpu.so as the dynamic linker mapped it.
struct Loaded {
  std::string path;
  uintptr_t base = 0;
  std::vector<std::pair<uintptr_t, uintptr_t>> executable;  // [begin, end)
  std::string build_id;
};

// The GNU build id among ELF notes in [data, data + size).
std::string build_id_of(const unsigned char* data, size_t size) {
  size_t at = 0;
  auto align4 = [](size_t n) { return (n + 3) & ~size_t{3}; };
  while (at + sizeof(Elf64_Nhdr) <= size) {
    Elf64_Nhdr note;
    std::memcpy(&note, data + at, sizeof(note));
    size_t name_at = at + sizeof(note);
    size_t desc_at = name_at + align4(note.n_namesz);
    if (desc_at + note.n_descsz > size) break;
    if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 &&
        std::memcmp(data + name_at, "GNU", 4) == 0)
      return std::string(reinterpret_cast<const char*>(data + desc_at), note.n_descsz);
    at = desc_at + align4(note.n_descsz);
  }
  return {};
}

int find_loaded(dl_phdr_info* info, size_t, void* out) {
  std::string_view path = info->dlpi_name ? info->dlpi_name : "";
  auto slash = path.rfind('/');
  auto file = slash == std::string_view::npos ? path : path.substr(slash + 1);
  if (file.substr(0, kLibrary.size()) != kLibrary) return 0;
  auto& loaded = *static_cast<Loaded*>(out);
  loaded.path = std::string(path);
  loaded.base = info->dlpi_addr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
      loaded.executable.emplace_back(begin, begin + ph.p_memsz);
    if (ph.p_type == PT_NOTE && loaded.build_id.empty())
      loaded.build_id = build_id_of(reinterpret_cast<const unsigned char*>(begin), ph.p_memsz);
  }
  return 1;
}

// A read-only mapping of the library file.
class Mapped {
 public:
  explicit Mapped(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st{};
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      void* p = ::mmap(nullptr, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p != MAP_FAILED) {
        data_ = static_cast<const unsigned char*>(p);
        size_ = static_cast<size_t>(st.st_size);
      }
    }
    ::close(fd);
  }
  ~Mapped() {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
  }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

// The sections of a 64-bit x86-64 ELF file, bounds-checked.
class ElfFile {
 public:
  explicit ElfFile(const Mapped& file) : file_(file) {}

  // Empty when the file is a well-formed x86-64 ELF; else what is wrong.
  std::string check() {
    if (!file_.data()) return "cannot be read";
    if (file_.size() < sizeof(Elf64_Ehdr)) return "is not an ELF file";
    std::memcpy(&header_, file_.data(), sizeof(header_));
    if (std::memcmp(header_.e_ident, ELFMAG, SELFMAG) != 0 ||
        header_.e_ident[EI_CLASS] != ELFCLASS64 || header_.e_machine != EM_X86_64)
      return "is not a 64-bit x86-64 ELF file";
    if (header_.e_shentsize != sizeof(Elf64_Shdr) ||
        header_.e_shoff + size_t{header_.e_shnum} * sizeof(Elf64_Shdr) > file_.size())
      return "has a malformed section table";
    sections_.resize(header_.e_shnum);
    std::memcpy(sections_.data(), file_.data() + header_.e_shoff,
                sections_.size() * sizeof(Elf64_Shdr));
    for (const auto& s : sections_)
      if (s.sh_type != SHT_NOBITS && s.sh_offset + s.sh_size > file_.size())
        return "has a section past its end";
    return {};
  }

  const Elf64_Shdr* section(uint32_t type) const {
    for (const auto& s : sections_)
      if (s.sh_type == type) return &s;
    return nullptr;
  }

  std::string build_id() const {
    for (const auto& s : sections_)
      if (s.sh_type == SHT_NOTE) {
        auto id = build_id_of(file_.data() + s.sh_offset, s.sh_size);
        if (!id.empty()) return id;
      }
    return {};
  }

  // Calls visit(name, symbol) for each defined function symbol of a symbol
  // table section.
  template <typename Visit>
  void functions(const Elf64_Shdr& table, Visit&& visit) const {
    if (table.sh_link >= sections_.size() || table.sh_entsize != sizeof(Elf64_Sym)) return;
    const auto& strings = sections_[table.sh_link];
    const char* names = reinterpret_cast<const char*>(file_.data() + strings.sh_offset);
    size_t count = table.sh_size / sizeof(Elf64_Sym);
    for (size_t i = 0; i < count; ++i) {
      Elf64_Sym sym;
      std::memcpy(&sym, file_.data() + table.sh_offset + i * sizeof(Elf64_Sym), sizeof(sym));
      if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF ||
          sym.st_name >= strings.sh_size)
        continue;
      size_t room = strings.sh_size - sym.st_name;
      std::string_view name(names + sym.st_name, strnlen(names + sym.st_name, room));
      if (name.size() < room) visit(name, sym);
    }
  }

 private:
  const Mapped& file_;
  Elf64_Ehdr header_{};
  std::vector<Elf64_Shdr> sections_;
};

std::string hex(const std::string& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// One exported function's address through dlsym agrees with the file's
// value plus the load address: the base and the file belong together.
std::string check_exported(const ElfFile& elf, const Loaded& loaded) {
  const auto* dynsym = elf.section(SHT_DYNSYM);
  if (!dynsym) return "it has no dynamic symbol table";
  std::string name;
  uintptr_t value = 0;
  elf.functions(*dynsym, [&](std::string_view n, const Elf64_Sym& sym) {
    if (name.empty() && ELF64_ST_BIND(sym.st_info) == STB_GLOBAL &&
        ELF64_ST_VISIBILITY(sym.st_other) == STV_DEFAULT && sym.st_value != 0) {
      name = std::string(n);
      value = sym.st_value;
    }
  });
  if (name.empty()) return "it exports no function to check its load address with";
  void* handle = ::dlopen(loaded.path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) return "dlopen does not find the loaded library";
  void* found = ::dlsym(handle, name.c_str());
  ::dlclose(handle);
  if (reinterpret_cast<uintptr_t>(found) != loaded.base + value)
    return "the exported function " + name + " is not where its symbol table says";
  return {};
}

bool executable(const Loaded& loaded, uintptr_t address) {
  for (const auto& [begin, end] : loaded.executable)
    if (address >= begin && address < end) return true;
  return false;
}

void reset_slots() {
#define GRAPHFUSE_DNNL_FUNCTION(index, name, status, required)                              \
  graphfuse_dnnl_slots[index] =                                                            \
      reinterpret_cast<void*>(status ? reinterpret_cast<uintptr_t>(&graphfuse_dnnl_missing_status) \
                                     : reinterpret_cast<uintptr_t>(&graphfuse_dnnl_missing_value));
#include "dnnl_api.inc"
#undef GRAPHFUSE_DNNL_FUNCTION
}

// Fills the slots; returns why oneDNN cannot be used, or empty.
std::string resolve(Availability& a) {
  Loaded loaded;
  dl_iterate_phdr(find_loaded, &loaded);
  if (loaded.path.empty()) return std::string(kLibrary) + " is not loaded in this process";
  a.library = loaded.path;
  Mapped file(loaded.path);
  ElfFile elf(file);
  if (auto wrong = elf.check(); !wrong.empty()) return loaded.path + " " + wrong;
  if (loaded.build_id.empty() || elf.build_id() != loaded.build_id)
    return loaded.path + " on disk is not the library loaded (GNU build ids " +
           hex(elf.build_id()) + " and " + hex(loaded.build_id) + ")";
  if (auto wrong = check_exported(elf, loaded); !wrong.empty()) return loaded.path + ": " + wrong;
  const auto* symtab = elf.section(SHT_SYMTAB);
  if (!symtab)
    return loaded.path + " has no ELF symbol table (.symtab): this torch build was stripped, "
           "and its oneDNN functions cannot be found";

  std::unordered_map<std::string_view, size_t> index;
  for (size_t i = 0; i < kCount; ++i) index.emplace(kFunctions[i].name, i);
  std::vector<uintptr_t> address(kCount, 0);
  std::vector<bool> ambiguous(kCount, false);
  elf.functions(*symtab, [&](std::string_view name, const Elf64_Sym& sym) {
    if (name.substr(0, 5) != "dnnl_") return;
    auto it = index.find(name);
    if (it == index.end()) return;
    uintptr_t at = loaded.base + sym.st_value;
    auto& slot = address[it->second];
    if (slot != 0 && slot != at) ambiguous[it->second] = true;
    slot = at;
  });
  std::string missing;
  for (size_t i = 0; i < kCount; ++i) {
    if (address[i] != 0 && (ambiguous[i] || !executable(loaded, address[i]))) address[i] = 0;
    if (address[i] == 0 && kFunctions[i].required)
      missing += (missing.empty() ? "" : ", ") + std::string(kFunctions[i].name);
  }
  if (!missing.empty())
    return loaded.path + " lacks oneDNN functions the plugin needs: " + missing;
  for (size_t i = 0; i < kCount; ++i)
    if (address[i] != 0) {
      graphfuse_dnnl_slots[i] = reinterpret_cast<void*>(address[i]);
      ++a.resolved;
    }

  const auto* v = dnnl_version();
  a.version = std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
              std::to_string(v->patch);
  a.hash = v->hash ? v->hash : "";
  if (v->major != DNNL_VERSION_MAJOR || v->minor != DNNL_VERSION_MINOR ||
      v->patch != DNNL_VERSION_PATCH || a.hash != DNNL_VERSION_HASH)
    return "torch's oneDNN is " + a.version + " (" + a.hash + ") but its headers are " +
           std::to_string(DNNL_VERSION_MAJOR) + "." + std::to_string(DNNL_VERSION_MINOR) + "." +
           std::to_string(DNNL_VERSION_PATCH) + " (" + DNNL_VERSION_HASH + ")";
  return {};
}

Availability find() {
  Availability a;
  a.listed = static_cast<int>(kCount);
  auto start = std::chrono::steady_clock::now();
  a.problem = resolve(a);
  a.ok = a.problem.empty();
  if (!a.ok) {
    reset_slots();
    a.resolved = 0;
  }
  a.resolve_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return a;
}

}  // namespace

const Availability& availability() {
  static const Availability a = find();
  return a;
}

int effective_cpu_isa() {
  return availability().ok ? static_cast<int>(dnnl_get_effective_cpu_isa()) : -1;
}

bool isa_has(const std::string& feature) {
  int isa = effective_cpu_isa();
  if (isa < 0) return false;
  // dnnl_cpu_isa_t values are bit sets, each holding the ISAs below it: VNNI is bit 0x8
  // (avx2_vnni) or 0x40 (avx512_core_vnni), bf16 bit 0x10 (avx2_vnni_2) or 0x80
  // (avx512_core_bf16).
  if (feature == "vnni") return (isa & 0x48) != 0;
  if (feature == "bf16") return (isa & 0x90) != 0;
  return false;
}

}  // namespace graphfuse::onednn
