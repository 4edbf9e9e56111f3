// External kernel libraries: the loader (dlopen, the table's checks) and the
// GPU path of one entry. The path's single stage calls the entry's launch
// with the DeviceCase's device pointers, so the harness runs an external
// kernel through exactly the checks and timing of the built-in paths.
// The ABI is include/pagecheck/external.h; docs/external-kernels.md.
#include "pagecheck/external_kernels.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "harness/harness.cuh"
#include "pagecheck/external.h"
#include "pagecheck/external_abi.hpp"

namespace pagecheck::gpu {

namespace {

namespace fs = std::filesystem;

// A loaded library. Never dlclose'd: the CUDA runtime inside it registers
// its kernels in the library's static constructors and unregisters them in
// its destructors, and graphs or kernels must not outlive that.
struct Library {
  std::string path;  // absolute
  std::string file_name;
  const pagecheck_kernel_table* table = nullptr;
};

// The message of a failing call of `e`: its last_error(), or a placeholder.
std::string library_message(const pagecheck_kernel_entry& e) {
  const char* message = e.last_error != nullptr ? e.last_error() : nullptr;
  return message != nullptr && *message != '\0' ? message : "(the library gave no message)";
}

class ExternalPath final : public GpuPath {
 public:
  // `entry` holds the library's entry as far as its entry_size reaches and
  // zeros beyond (a 1.0 entry has no plan fields).
  ExternalPath(std::shared_ptr<const Library> library, const pagecheck_kernel_entry& entry, std::string_view prefix)
      : library_(std::move(library)), entry_(entry), name_(external_path_name(prefix, entry.name)) {}

  std::string name() const override { return name_; }

  Applicability applies(const Case& c) const override {
    const pagecheck_case_desc desc = describe_external_case(c);
    if (std::string why = external_refusal(entry_, library_->table->abi_minor, c, desc); !why.empty())
      return {false, why};
    std::array<char, 1024> reason{};
    if (entry_.supports(&desc, reason.data(), reason.size()) != 0) return {true, {}};
    reason.back() = '\0';
    std::string why = reason.data();
    if (why.empty()) why = "declined by " + library_->file_name + " (its supports() gave no reason)";
    return {false, why};
  }

  Expected<PreparedPath> prepare(const Case& c, DeviceCase& d, const RunOptions&) override {
    PreparedPath p;
    pagecheck_case_desc desc = describe_external_case(c);
    desc.num_blocks = d.view.kv.num_blocks;  // the pool may have a spare page appended
    if (desc.key_stride_block != d.view.kv.key_strides.block || desc.value_stride_block != d.view.kv.value_strides.block)
      return runtime_error("the uploaded cache strides differ from the description", name_);

    void* workspace = nullptr;
    const std::uint64_t bytes = entry_.workspace_bytes != nullptr ? entry_.workspace_bytes(&desc) : 0;
    const std::uint64_t plan_bytes = entry_.plan_workspace_bytes != nullptr ? entry_.plan_workspace_bytes(&desc) : 0;
    const std::uint64_t staging_bytes = entry_.host_staging_bytes != nullptr ? entry_.host_staging_bytes(&desc) : 0;
    if (plan_bytes > bytes)
      return runtime_error(fmt::format("plan_workspace_bytes ({}) exceeds workspace_bytes ({}): the plan-owned part "
                                       "is the leading part of the workspace",
                                       plan_bytes, bytes),
                           name_);
    if (bytes > 0) {
      auto buffer = device_alloc(static_cast<std::size_t>(bytes));
      if (!buffer) return buffer.error();
      workspace = buffer->get();
      p.workspace.push_back(std::move(*buffer));  // NaN-filled by the harness before each plan and run
    }
    void* staging = nullptr;
    if (staging_bytes > 0) {
      auto buffer = pinned_alloc(static_cast<std::size_t>(staging_bytes));
      if (!buffer) return buffer.error();
      staging = buffer->get();
      p.host_buffers.push_back(std::move(*buffer));
    }
    p.notes["library"] = library_->path;
    p.notes["abi"] = fmt::format("{}.{}", library_->table->abi_major, library_->table->abi_minor);
    p.notes["workspace_bytes"] = std::to_string(bytes);
    if (entry_.plan != nullptr) {
      p.notes["plan_workspace_bytes"] = std::to_string(plan_bytes);
      p.notes["host_staging_bytes"] = std::to_string(staging_bytes);
    }
    if (entry_.description != nullptr && *entry_.description != '\0') p.notes["description"] = entry_.description;
    p.plan = library_->file_name;

    pagecheck_buffers buffers{};
    buffers.struct_size = sizeof(pagecheck_buffers);
    buffers.query = d.view.query;
    buffers.key_cache = d.view.kv.key_data;
    // A latent cache: V is a column prefix of K, one pointer (ABI 1.2's value_in_key).
    buffers.value_cache = c.has_latent() ? d.view.kv.key_data : d.view.kv.value_data;
    buffers.page_indptr = d.view.kv.page_indptr;
    buffers.page_indices = d.view.kv.page_indices;
    buffers.seq_lens = d.view.kv.seq_lens;
    buffers.query_start_loc = d.view.query_start_loc;
    buffers.output = d.view.output;
    buffers.lse = d.view.lse;
    buffers.sinks = c.has_sinks() ? d.sinks.as<float>() : nullptr;
    buffers.alibi_slopes = c.has_alibi() ? d.alibi_slopes.as<float>() : nullptr;

    const pagecheck_kernel_entry* entry = &entry_;
    const std::string name = name_;
    if (entry_.plan != nullptr) {
      p.plan_step = [entry, desc, buffers, workspace, staging, name](const DeviceCase& dc,
                                                                    cudaStream_t stream) -> Status {
        pagecheck_plan_inputs host{};
        host.struct_size = sizeof(pagecheck_plan_inputs);
        host.seq_lens = dc.host_seq_lens.data();
        host.query_start_loc = dc.host_query_start_loc.data();
        host.page_indptr = dc.host_page_indptr.data();
        const int rc = entry->plan(&desc, &host, &buffers, workspace, staging, static_cast<void*>(stream));
        if (rc == 0) return {};
        return runtime_error(fmt::format("plan returned {}: {}", rc, library_message(*entry)), name);
      };
    }
    const AttentionModel m = attention_model(c);
    p.stages.push_back(Stage{
        name_,
        [entry, desc, buffers, workspace, name](cudaStream_t stream) -> Status {
          const int rc = entry->launch(&desc, &buffers, workspace, static_cast<void*>(stream));
          if (rc == 0) return {};
          return runtime_error(fmt::format("launch returned {}: {}", rc, library_message(*entry)), name);
        },
        m.bytes(), m.flops});
    return p;
  }

 private:
  std::shared_ptr<const Library> library_;
  pagecheck_kernel_entry entry_;  // the library's entry, zero beyond its entry_size
  std::string name_;
};

bool valid_entry_name(const char* name) {
  if (name == nullptr || *name == '\0') return false;
  std::size_t n = 0;
  for (const char* ch = name; *ch != '\0'; ++ch, ++n) {
    const char c = *ch;
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.';
    if (!ok || n >= 64) return false;
  }
  return true;
}

}  // namespace

Expected<std::vector<std::unique_ptr<Path>>> load_external_kernels(const std::string& file, std::string_view prefix) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return invalid_input("no such file (--kernel)", file);
  if (fs::is_directory(file, ec)) return invalid_input("is a folder, not a kernel library (--kernel)", file);
  auto library = std::make_shared<Library>();
  library->path = fs::absolute(file, ec).lexically_normal().string();
  library->file_name = fs::path(file).filename().string();

  dlerror();
  void* handle = dlopen(library->path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return invalid_input(fmt::format("cannot be loaded as a kernel library: {}", why != nullptr ? why : "dlopen failed"),
                         file);
  }
  dlerror();
  void* symbol = dlsym(handle, PAGECHECK_KERNELS_SYMBOL);
  if (symbol == nullptr)
    return invalid_input(fmt::format("does not export {}: not a pagecheck kernel library (see "
                                     "include/pagecheck/external.h)",
                                     PAGECHECK_KERNELS_SYMBOL),
                         file);
  const auto get_table = reinterpret_cast<pagecheck_kernels_fn>(symbol);
  const pagecheck_kernel_table* table = get_table();
  if (table == nullptr) return invalid_input(fmt::format("{}() returned NULL", PAGECHECK_KERNELS_SYMBOL), file);
  if (table->abi_major != PAGECHECK_ABI_MAJOR)
    return invalid_input(fmt::format("was built for the external-kernel ABI {}.{}, but this pagecheck takes {}.x "
                                     "(ABI {}.{}); rebuild it against this pagecheck's include/pagecheck/external.h",
                                     table->abi_major, table->abi_minor, PAGECHECK_ABI_MAJOR, PAGECHECK_ABI_MAJOR,
                                     PAGECHECK_ABI_MINOR),
                         file);
  if (table->entry_size < PAGECHECK_ENTRY_SIZE_1_0)
    return invalid_input(fmt::format("its table's entry_size is {} bytes; ABI {}.0 entries have {}", table->entry_size,
                                     PAGECHECK_ABI_MAJOR, PAGECHECK_ENTRY_SIZE_1_0),
                         file);
  if (table->count == 0 || table->entries == nullptr) return invalid_input("exports no kernels (count 0)", file);
  library->table = table;

  std::vector<std::unique_ptr<Path>> paths;
  std::set<std::string> names;
  const auto* bytes = reinterpret_cast<const unsigned char*>(table->entries);
  for (std::uint32_t i = 0; i < table->count; ++i) {
    // Entries of a newer minor are longer: step by the library's entry size.
    // An older minor's entry is shorter: copy what it has, zeros after it.
    pagecheck_kernel_entry entry{};
    std::memcpy(&entry, bytes + std::size_t{i} * table->entry_size,
                std::min<std::size_t>(table->entry_size, sizeof(pagecheck_kernel_entry)));
    if (!valid_entry_name(entry.name))
      return invalid_input(fmt::format("entry {}: the name must be 1-64 letters, digits, '_', '-' or '.', got '{}'", i,
                                       entry.name != nullptr ? entry.name : "(NULL)"),
                           file);
    if (!names.insert(entry.name).second)
      return invalid_input(fmt::format("entry {}: the name '{}' appears twice", i, entry.name), file);
    if (entry.supports == nullptr || entry.launch == nullptr)
      return invalid_input(fmt::format("entry {} ('{}'): supports and launch must be set", i, entry.name), file);
    if (entry.plan == nullptr && (entry.plan_workspace_bytes != nullptr || entry.host_staging_bytes != nullptr))
      return invalid_input(fmt::format("entry {} ('{}'): plan_workspace_bytes or host_staging_bytes is set without "
                                       "plan (ABI 1.1: they size what plan writes)",
                                       i, entry.name),
                           file);
    paths.push_back(std::make_unique<ExternalPath>(library, entry, prefix));
  }
  return paths;
}

}  // namespace pagecheck::gpu
