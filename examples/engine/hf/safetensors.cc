// SPDX-License-Identifier: BSD-3-Clause
#include "safetensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <set>

#include "input_file.h"
#include "json_util.h"
#include "mapped_read.h"
#include "model.h"

namespace engine::hf {

namespace {

// The format caps the header at 100 MB; anything larger is a corrupt length.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

size_t dtypeBytes(Dtype d) { return d == Dtype::F32 ? 4 : 2; }

Dtype parseDtype(const std::string& name) {
  if (name == "F32") return Dtype::F32;
  if (name == "F16") return Dtype::F16;
  if (name == "BF16") return Dtype::BF16;
  return Dtype::Other;
}

// Element sizes of the dtypes we do not convert, so their offsets can still be checked.
size_t otherDtypeBytes(const std::string& name) {
  if (name == "F64" || name == "I64" || name == "U64" || name == "C64") return 8;
  if (name == "I32" || name == "U32") return 4;
  if (name == "I16" || name == "U16") return 2;
  if (name == "I8" || name == "U8" || name == "BOOL" || name.rfind("F8_", 0) == 0) return 1;
  return 0;
}

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// What a read of a mapping that shrank under it says (mapped_read.h).
const char* const kShrank = "the file became shorter while it was being read (another process truncated or rewrote it)";

// Runs `read` of tensor t's bytes into `out`; throws naming the file and
// tensor when the file shrank under it, or when what it read holds a NaN or
// an infinity, then with the element's index in the whole tensor
// (elementOf(i) for out[i]: a shard reads a slice).
template <typename F, typename G>
void readTensor(const TensorInfo& t, const std::vector<float>& out, F&& read, G&& elementOf) {
  const std::string where = t.file + ": tensor " + t.name;
  if (!readMapped(t.data, t.bytes, read)) throw EngineError(where + ": " + kShrank);
  const size_t at = firstNonFinite(out.data(), out.size());
  if (at != out.size())
    throw EngineError(where + " holds " + std::to_string(out[at]) + " at element " + std::to_string(elementOf(at)) +
                      " of its " + std::to_string(t.elements()) + " (a corrupt checkpoint?)");
}

// Converts `count` elements starting at element `first` of `t` into `out`
// (inside readTensor).
void convert(const TensorInfo& t, size_t first, size_t count, float* out) {
  const uint8_t* src = t.data + first * dtypeBytes(t.dtype);
  if (t.dtype == Dtype::F32) {
    std::memcpy(out, src, count * sizeof(float));
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    uint16_t bits;
    std::memcpy(&bits, src + 2 * i, 2);  // the data need not be aligned
    out[i] = t.dtype == Dtype::BF16 ? bf16ToFloat(bits) : f16ToFloat(bits);
  }
}

}  // namespace

int64_t TensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = openRegularFile(path, &size_);
  if (size_ < 8) {
    ::close(fd);
    throw EngineError(path + ": " + std::to_string(size_) +
                      " bytes, too short for a safetensors file (truncated?)");
  }
  map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw EngineError(path + ": mmap failed (" + std::strerror(err) + ")");
  }
  try {
    parseHeader();
  } catch (const Json::exception& e) {
    ::munmap(map_, size_);
    throw EngineError(path + ": unexpected header structure (" + e.what() + ")");
  } catch (...) {
    ::munmap(map_, size_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, size_);
}

// Copies bytes out of the mapping; throws naming the file when it shrank.
void SafetensorsFile::copyOut(void* dst, const uint8_t* src, size_t bytes) const {
  if (!readMapped(src, bytes, [&] { std::memcpy(dst, src, bytes); })) throw EngineError(path_ + ": " + kShrank);
}

// Layout: u64 little-endian header length N, N bytes of JSON, then the data;
// each tensor's data_offsets [begin, end) are relative to the data start.
void SafetensorsFile::parseHeader() {
  const uint8_t* base = static_cast<const uint8_t*>(map_);
  uint8_t length[8];
  copyOut(length, base, sizeof length);
  uint64_t headerBytes = 0;
  for (int i = 7; i >= 0; --i) headerBytes = (headerBytes << 8) | length[i];
  if (headerBytes > kMaxHeaderBytes || headerBytes > size_ - 8)
    throw EngineError(path_ + ": header length " + std::to_string(headerBytes) + " does not fit in the " +
                      std::to_string(size_) + "-byte file (truncated or corrupt)");
  std::string text(headerBytes, '\0');
  copyOut(text.data(), base + 8, headerBytes);
  const Json header = parseJsonUniqueKeys(text.data(), text.data() + headerBytes, path_ + " header");
  if (!header.is_object()) throw EngineError(path_ + ": header is not a JSON object");

  const uint8_t* data = base + 8 + headerBytes;
  const uint64_t dataBytes = size_ - 8 - headerBytes;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string where = path_ + ": tensor " + it.key();
    const Json& entry = it.value();
    TensorInfo t;
    t.name = it.key();
    t.file = path_;
    t.dtypeName = requireString(entry, "dtype", where);
    t.dtype = parseDtype(t.dtypeName);
    const size_t elementBytes = t.dtype != Dtype::Other ? dtypeBytes(t.dtype) : otherDtypeBytes(t.dtypeName);
    if (elementBytes == 0) throw EngineError(where + ": unknown dtype " + t.dtypeName);

    const Json& shape = entry.contains("shape") ? entry["shape"] : Json();
    const Json& offsets = entry.contains("data_offsets") ? entry["data_offsets"] : Json();
    if (!shape.is_array()) throw EngineError(where + ": shape is missing or not a list");
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      throw EngineError(where + ": data_offsets is not a pair of non-negative integers");
    uint64_t elements = 1;
    for (const Json& d : shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (1ull << 40))
        throw EngineError(where + ": shape has an invalid dimension");
      const uint64_t extent = d.get<uint64_t>();
      t.shape.push_back(int64_t(extent));
      if (extent != 0 && elements > (1ull << 40) / extent)  // checked before it could wrap
        throw EngineError(where + ": shape is implausibly large");
      elements *= extent;
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end || end > dataBytes)
      throw EngineError(where + ": data [" + std::to_string(begin) + ", " + std::to_string(end) +
                        ") lies outside the file's " + std::to_string(dataBytes) +
                        " data bytes (truncated or corrupt)");
    if (end - begin != elements * elementBytes)
      throw EngineError(where + ": " + std::to_string(end - begin) + " data bytes do not hold shape " +
                        shapeText(t.shape) + " of " + t.dtypeName);
    t.data = data + begin;
    t.bytes = size_t(end - begin);
    tensors_.emplace(t.name, std::move(t));
  }
  requireDisjoint();
}

// Two tensors over the same bytes mean a corrupt header (the reference
// safetensors library refuses them too); one would read the other's data.
void SafetensorsFile::requireDisjoint() const {
  std::vector<const TensorInfo*> byStart;
  for (const auto& entry : tensors_)
    if (entry.second.bytes > 0) byStart.push_back(&entry.second);
  std::sort(byStart.begin(), byStart.end(), [](const TensorInfo* a, const TensorInfo* b) { return a->data < b->data; });
  for (size_t i = 1; i < byStart.size(); ++i) {
    const TensorInfo& before = *byStart[i - 1];
    if (byStart[i]->data < before.data + before.bytes)
      throw EngineError(path_ + ": tensors " + before.name + " and " + byStart[i]->name +
                        " share data bytes (corrupt header)");
  }
}

// A name of a file in the checkpoint's directory itself. JSON allows \u0000
// in a string: "a\u0000b" would open "a", another file than the index names.
static bool isPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find_first_of(std::string("/\0", 2)) == std::string::npos;
}

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir) {
  const std::string indexPath = dir + "/model.safetensors.index.json";
  std::vector<std::string> fileNames;
  if (::access(indexPath.c_str(), F_OK) == 0) {  // every access below is type-checked
    const Json index = readJsonFile(indexPath);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      throw EngineError(indexPath + ": no \"weight_map\" object");
    std::set<std::string> unique;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it->is_string()) throw EngineError(indexPath + ": weight_map entry " + it.key() + " is not a file name");
      const std::string file = it->get<std::string>();
      if (!isPlainFileName(file))
        throw EngineError(indexPath + ": shard name " + Json(file).dump() + " is not a plain file name");
      if (unique.insert(file).second) fileNames.push_back(file);
    }
  } else {
    fileNames.push_back("model.safetensors");
  }
  for (const std::string& name : fileNames) {
    files_.push_back(std::make_unique<SafetensorsFile>(dir + "/" + name));
    for (const auto& [tensor, info] : files_.back()->tensors()) {
      if (!tensors_.emplace(tensor, &info).second)
        throw EngineError(dir + ": tensor " + tensor + " appears in more than one shard");
    }
  }
}

const TensorInfo& Checkpoint::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw EngineError(dir_ + ": tensor " + name + " is missing from the checkpoint");
  touched_.insert(name);
  return *it->second;
}

std::vector<std::string> Checkpoint::untouched() const {
  std::vector<std::string> names;
  for (const auto& entry : tensors_)
    if (!touched_.count(entry.first)) names.push_back(entry.first);
  return names;
}

const TensorInfo& Checkpoint::checked(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorInfo& t = get(name);
  if (t.shape != shape)
    throw EngineError(t.file + ": tensor " + name + " has shape " + shapeText(t.shape) + ", config.json implies " +
                      shapeText(shape));
  if (t.dtype == Dtype::Other)
    throw EngineError(t.file + ": tensor " + name + " has dtype " + t.dtypeName + " (BF16, F16, F32 are supported)");
  return t;
}

std::vector<float> Checkpoint::read(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorInfo& t = checked(name, shape);
  std::vector<float> out(size_t(t.elements()));
  readTensor(t, out, [&] { convert(t, 0, out.size(), out.data()); }, [](size_t i) { return i; });
  return out;
}

namespace {

// Throws unless [first, first + count) lies within 0..limit.
void checkSlice(const std::string& name, int64_t first, int64_t count, int64_t limit, const char* what) {
  if (first < 0 || count < 0 || first + count > limit)
    throw EngineError(name + ": " + what + " [" + std::to_string(first) + ", " + std::to_string(first + count) +
                      ") are outside its " + std::to_string(limit) + " " + what);
}

}  // namespace

std::vector<float> Checkpoint::readRows(const std::string& name, int64_t rows, int64_t cols, int64_t first,
                                        int64_t count) const {
  const TensorInfo& t = checked(name, {rows, cols});
  checkSlice(name, first, count, rows, "rows");
  std::vector<float> out(size_t(count * cols));
  readTensor(t, out, [&] { convert(t, size_t(first * cols), out.size(), out.data()); },
             [&](size_t i) { return size_t(first * cols) + i; });
  return out;
}

std::vector<float> Checkpoint::readCols(const std::string& name, int64_t rows, int64_t cols, int64_t first,
                                        int64_t count) const {
  const TensorInfo& t = checked(name, {rows, cols});
  checkSlice(name, first, count, cols, "columns");
  std::vector<float> out(size_t(rows * count));
  readTensor(
      t, out,
      [&] {
        for (int64_t r = 0; r < rows; ++r) convert(t, size_t(r * cols + first), size_t(count), &out[size_t(r * count)]);
      },
      [&](size_t i) { return size_t(int64_t(i) / count * cols + first + int64_t(i) % count); });
  return out;
}

float bf16ToFloat(uint16_t bits) {
  const uint32_t wide = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

float f16ToFloat(uint16_t bits) {
  const uint32_t sign = uint32_t(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1f;
  uint32_t mantissa = bits & 0x3ff;
  uint32_t wide;
  if (exponent == 0x1f) {
    wide = sign | 0x7f800000u | (mantissa << 13);  // inf / nan
  } else if (exponent != 0) {
    wide = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    wide = sign;  // signed zero
  } else {
    // Subnormal: shift the mantissa up until its leading one is the implicit bit.
    exponent = 113;
    while ((mantissa & 0x400) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    wide = sign | (exponent << 23) | ((mantissa & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

uint16_t floatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);  // quiet nan
  bits += 0x7fff + ((bits >> 16) & 1);
  return uint16_t(bits >> 16);
}

}  // namespace engine::hf
