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

#include "harness.cuh"
#include "pagecheck/external.h"

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

int dtype_code(DType d) {
  switch (d) {
    case DType::F32: return PAGECHECK_DTYPE_F32;
    case DType::F16: return PAGECHECK_DTYPE_F16;
    case DType::BF16: return PAGECHECK_DTYPE_BF16;
    case DType::F8_E4M3: return PAGECHECK_DTYPE_F8_E4M3;
    case DType::F8_E5M2: return PAGECHECK_DTYPE_F8_E5M2;
    default: return 0;
  }
}

constexpr std::array<DType, 5> kAbiDtypes = {DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2};

std::string dtype_list(std::uint32_t mask) {
  std::string out;
  for (DType d : kAbiDtypes)
    if (mask & PAGECHECK_DTYPE_BIT(dtype_code(d))) out += (out.empty() ? "" : ", ") + std::string(dtype_name(d));
  return out;
}

// The description of `c` as pagecheck_kernels sees it at upload: geometry,
// parameters and the strides of the contiguous buffers upload_case makes.
pagecheck_case_desc describe_case(const Case& c) {
  pagecheck_case_desc d{};
  d.abi_major = PAGECHECK_ABI_MAJOR;
  d.abi_minor = PAGECHECK_ABI_MINOR;
  d.struct_size = sizeof(pagecheck_case_desc);
  d.query_dtype = dtype_code(c.query.dtype);
  d.kv_dtype = dtype_code(c.key_cache.dtype);
  d.output_dtype = d.query_dtype;
  d.kv_layout = c.params.layout == KvLayout::NHD ? PAGECHECK_LAYOUT_NHD : PAGECHECK_LAYOUT_HND;
  d.table_form = c.table.form == TableForm::Dense ? PAGECHECK_TABLE_DENSE : PAGECHECK_TABLE_CSR;
  d.causal = c.params.causal ? 1 : 0;
  d.is_decode = c.is_decode() ? 1 : 0;
  d.num_seqs = c.num_seqs();
  d.num_tokens = c.num_tokens();
  d.num_blocks = c.num_blocks();
  d.table_entries = static_cast<std::int64_t>(c.table.page_indices.size());
  if (c.table.form == TableForm::Dense) {
    d.max_blocks_per_seq = c.table.max_blocks_per_seq;
  } else {
    for (std::size_t s = 0; s + 1 < c.table.page_indptr.size(); ++s)
      d.max_blocks_per_seq = std::max(d.max_blocks_per_seq, c.table.page_indptr[s + 1] - c.table.page_indptr[s]);
  }
  d.block_size = static_cast<std::int32_t>(c.block_size());
  d.q_heads = static_cast<std::int32_t>(c.q_heads());
  d.kv_heads = static_cast<std::int32_t>(c.kv_heads());
  d.head_dim = static_cast<std::int32_t>(c.key_head_dim());
  d.v_head_dim = static_cast<std::int32_t>(c.v_head_dim());
  d.max_q_len = static_cast<std::int32_t>(c.max_q_len());
  d.max_seq_len = static_cast<std::int32_t>(c.max_seq_len());
  d.window = c.params.sliding_window;
  d.scale = static_cast<float>(c.scale());
  d.softcap = static_cast<float>(c.params.softcap);
  d.k_scale = static_cast<float>(c.params.k_scale);
  d.v_scale = static_cast<float>(c.params.v_scale);
  d.query_stride_token = c.q_heads() * c.head_dim();
  d.query_stride_head = c.head_dim();
  const CacheStrides ks = cache_strides(c.params.layout, c.block_size(), c.kv_heads(), c.key_head_dim());
  const CacheStrides vs = cache_strides(c.params.layout, c.block_size(), c.kv_heads(), c.v_head_dim());
  d.key_stride_block = ks.block;
  d.key_stride_slot = ks.slot;
  d.key_stride_head = ks.head;
  d.value_stride_block = vs.block;
  d.value_stride_slot = vs.slot;
  d.value_stride_head = vs.head;
  d.output_stride_token = c.q_heads() * c.v_head_dim();
  d.output_stride_head = c.v_head_dim();
  d.lse_stride_token = c.q_heads();
  return d;
}

// The declared capabilities of `e` against the case: the refusals that read
// the same for every library. Empty when nothing declared refuses.
std::string declared_refusal(const pagecheck_kernel_entry& e, const Case& c, const pagecheck_case_desc& d) {
  if (c.key_cache.dtype != c.value_cache.dtype)
    return fmt::format("key cache {} and value cache {} differ; the external ABI takes one KV dtype",
                       dtype_name(c.key_cache.dtype), dtype_name(c.value_cache.dtype));
  if (d.query_dtype == 0 || d.kv_dtype == 0)
    return fmt::format("dtypes Q {} KV {} have no code in the external ABI", dtype_name(c.query.dtype),
                       dtype_name(c.key_cache.dtype));
  if (e.query_dtypes != 0 && !(e.query_dtypes & PAGECHECK_DTYPE_BIT(d.query_dtype)))
    return fmt::format("query dtype {} is not taken; takes: {}", dtype_name(c.query.dtype), dtype_list(e.query_dtypes));
  if (e.kv_dtypes != 0 && !(e.kv_dtypes & PAGECHECK_DTYPE_BIT(d.kv_dtype)))
    return fmt::format("kv dtype {} is not taken; takes: {}", dtype_name(c.key_cache.dtype), dtype_list(e.kv_dtypes));
  if (e.layouts != 0 && !(e.layouts & PAGECHECK_LAYOUT_BIT(d.kv_layout)))
    return fmt::format("layout {} is not taken; takes: {}", d.kv_layout == PAGECHECK_LAYOUT_NHD ? "NHD" : "HND",
                       (e.layouts & PAGECHECK_LAYOUT_BIT(PAGECHECK_LAYOUT_NHD)) ? "NHD" : "HND");
  if (e.table_forms != 0 && !(e.table_forms & PAGECHECK_TABLE_BIT(d.table_form)))
    return fmt::format("{} tables are not taken", d.table_form == PAGECHECK_TABLE_DENSE ? "dense" : "CSR");
  if (e.features != 0) {
    if (d.is_decode && !(e.features & PAGECHECK_FEATURE_DECODE))
      return "decode cases (every q_len 1) are not taken";
    if (!d.is_decode && !(e.features & PAGECHECK_FEATURE_PREFILL)) {
      for (std::int64_t s = 0; s < c.num_seqs(); ++s)
        if (c.q_len(s) != 1)
          return fmt::format("takes decode cases only (one query token per sequence); sequence {} has q_len {}", s,
                             c.q_len(s));
    }
    if (d.window > 0 && !(e.features & PAGECHECK_FEATURE_WINDOW))
      return fmt::format("no sliding window (the case has {})", d.window);
    if (d.softcap > 0 && !(e.features & PAGECHECK_FEATURE_SOFTCAP))
      return fmt::format("no softcap (the case has {:g})", c.params.softcap);
    if ((c.params.k_scale != 1.0 || c.params.v_scale != 1.0) && !(e.features & PAGECHECK_FEATURE_KV_SCALES))
      return fmt::format("no k_scale/v_scale (the case has {:g}/{:g})", c.params.k_scale, c.params.v_scale);
    if (!d.causal && !(e.features & PAGECHECK_FEATURE_NON_CAUSAL)) return "causal cases only";
  }
  if (e.min_block_size > 0 && d.block_size < e.min_block_size)
    return fmt::format("block_size {} is below its minimum {}", d.block_size, e.min_block_size);
  if (e.max_block_size > 0 && d.block_size > e.max_block_size)
    return fmt::format("block_size {} is above its maximum {}", d.block_size, e.max_block_size);
  if (e.head_dim_count > 0 && e.head_dims != nullptr) {
    std::string built;
    for (std::uint32_t i = 0; i < e.head_dim_count; ++i) {
      const std::int32_t k = e.head_dims[2 * i], v = e.head_dims[2 * i + 1];
      if (k == d.head_dim && v == d.v_head_dim) return {};
      built += (built.empty() ? "" : ", ") + (k == v ? std::to_string(k) : fmt::format("{}/{}", k, v));
    }
    return fmt::format("head_dim {}/{} is not taken; takes: {}", d.head_dim, d.v_head_dim, built);
  }
  return {};
}

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
    const pagecheck_case_desc desc = describe_case(c);
    if (std::string why = declared_refusal(entry_, c, desc); !why.empty()) return {false, why};
    std::array<char, 1024> reason{};
    if (entry_.supports(&desc, reason.data(), reason.size()) != 0) return {true, {}};
    reason.back() = '\0';
    std::string why = reason.data();
    if (why.empty()) why = "declined by " + library_->file_name + " (its supports() gave no reason)";
    return {false, why};
  }

  Expected<PreparedPath> prepare(const Case& c, DeviceCase& d, const RunOptions&) override {
    PreparedPath p;
    pagecheck_case_desc desc = describe_case(c);
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
    buffers.value_cache = d.view.kv.value_data;
    buffers.page_indptr = d.view.kv.page_indptr;
    buffers.page_indices = d.view.kv.page_indices;
    buffers.seq_lens = d.view.kv.seq_lens;
    buffers.query_start_loc = d.view.query_start_loc;
    buffers.output = d.view.output;
    buffers.lse = d.view.lse;

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
