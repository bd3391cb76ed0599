// SPDX-License-Identifier: BSD-3-Clause
// Reader for safetensors checkpoints: one file, or the shards listed by
// model.safetensors.index.json. Each file is mmapped read-only and its header
// checked against the file size up front, so a truncated or corrupt file
// fails with a message naming the file and the tensor, never a crash; a file
// that shrinks while it is read fails the same way (mapped_read.h). Reads
// convert BF16/F16/F32 to float32 and touch only the bytes asked for: a
// tensor-parallel rank that reads its rows or columns pages in only those.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <set>
#include <vector>

namespace engine::hf {

enum class Dtype { F32, F16, BF16, Other };

struct TensorInfo {
  std::string name;
  std::string dtypeName;          // as written in the header, e.g. "BF16"
  Dtype dtype = Dtype::Other;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // inside the mapping, already bounds-checked
  size_t bytes = 0;
  std::string file;               // for messages

  int64_t elements() const;
};

// One mmapped .safetensors file.
class SafetensorsFile {
 public:
  // Throws EngineError naming the file (and the tensor) when it is missing,
  // truncated, or its header is malformed or points outside the file.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }

 private:
  void parseHeader();
  void copyOut(void* dst, const uint8_t* src, size_t bytes) const;
  void requireDisjoint() const;

  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
};

// Every tensor of a checkpoint directory, wherever it lives.
class Checkpoint {
 public:
  // Opens `dir`/model.safetensors.index.json and its shards when present,
  // else `dir`/model.safetensors.
  explicit Checkpoint(const std::string& dir);

  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws EngineError naming the tensor (and the directory) when absent.
  const TensorInfo& get(const std::string& name) const;
  // The tensors no get() (or read) has asked for so far, in name order.
  std::vector<std::string> untouched() const;

  // The whole tensor as float32; throws unless its shape is `shape`.
  std::vector<float> read(const std::string& name, const std::vector<int64_t>& shape) const;
  // Rows [first, first+count) of a 2-D tensor of shape [rows][cols].
  std::vector<float> readRows(const std::string& name, int64_t rows, int64_t cols, int64_t first,
                              int64_t count) const;
  // Columns [first, first+count) of a 2-D tensor of shape [rows][cols].
  std::vector<float> readCols(const std::string& name, int64_t rows, int64_t cols, int64_t first,
                              int64_t count) const;

 private:
  const TensorInfo& checked(const std::string& name, const std::vector<int64_t>& shape) const;

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> tensors_;
  mutable std::set<std::string> touched_;  // names get() was asked for
};

// Element conversions (exposed for tests and for writers of test models).
float bf16ToFloat(uint16_t bits);
float f16ToFloat(uint16_t bits);
uint16_t floatToBf16(float value);  // round to nearest even

}  // namespace engine::hf
