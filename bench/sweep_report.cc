// SPDX-License-Identifier: BSD-3-Clause
#include "sweep_report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>

#include "core/dtype.h"
#include "sweep_options.h"

namespace rcn::bench {
namespace {

std::string printfText(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string printfText(const char* fmt, ...) {
  va_list args, again;
  va_start(args, fmt);
  va_copy(again, args);
  const int length = vsnprintf(nullptr, 0, fmt, args);  // whole, however long the escaped text in it
  va_end(args);
  std::string out(length > 0 ? size_t(length) : 0, '\0');
  if (length > 0) vsnprintf(out.data(), out.size() + 1, fmt, again);
  va_end(again);
  return out;
}

// The length of the valid UTF-8 sequence at text[i] (1-4), or 0 when the
// bytes there are not one (a stray continuation byte, a truncated or overlong
// sequence, a surrogate, past U+10FFFF).
size_t utf8SequenceAt(const std::string& text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  const size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : (lead >> 3) == 0x1e ? 4 : 0;
  if (length == 0 || i + length > text.size()) return 0;
  uint32_t code = length == 1 ? lead : lead & (0x7f >> length);
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    code = code << 6 | (byte(i + k) & 0x3f);
  }
  const uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < smallest[length] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
  return length;
}

bool modePresent(const SweepResults& r, Mode mode) {
  for (const Point& p : r.points)
    if (p.mode == mode) return true;
  return false;
}

bool methodPresent(const SweepResults& r, int method, Mode mode) {
  for (const Point& p : r.points)
    if (p.method == method && p.mode == mode) return true;
  return false;
}

// "2.51x", or "-" when there is nothing to compare.
std::string speedupText(double s) { return s > 0 ? printfText("%.2fx", s) : "-"; }

std::string methodBlock(const SweepResults& r, int method, Mode mode) {
  std::string out = printfText("\n# %s (%s), %s\n", kMethods[method].label, kMethods[method].name,
                               modeName(mode));
  out += printfText("#%9s %11s %6s %6s %10s %9s %9s %9s %9s %7s %8s %8s\n", "size", "count", "type",
                    "redop", "time(us)", "min", "max", "algbw", "busbw", "#wrong", "vs nccl",
                    "vs ring");
  for (size_t bytes : resultSizes(r)) {
    const Point* p = nullptr;
    for (const Point& q : r.points)
      if (q.method == method && q.mode == mode && q.bytes == bytes) p = &q;
    if (!p) continue;
    std::string head = printfText(" %9s %11zu %6s %6s", formatBytes(p->bytes).c_str(), p->count,
                                  dtypeShortName(r.dtype), opName(r.op));
    if (!p->measured) {
      out += head + "  n/a: " + p->note + "\n";
      continue;
    }
    std::string wrong = p->wrong < 0 ? "-" : std::to_string(p->wrong);
    out += head + printfText(" %10.2f %9.2f %9.2f %9.2f %9.2f %7s %8s %8s\n", p->us.median,
                             p->us.min, p->us.max, algBandwidthGBs(p->bytes, p->us.median),
                             busBandwidthGBs(p->bytes, p->us.median, r.nranks), wrong.c_str(),
                             speedupText(speedupOver(r, *p, kBaselineDefault)).c_str(),
                             speedupText(speedupOver(r, *p, kBaselineRing)).c_str());
  }
  return out;
}

// One line per size: every method's median side by side, and the fastest.
std::string comparisonTable(const SweepResults& r, Mode mode) {
  std::vector<int> shown;
  for (int m = 0; m < kNumMethods; ++m)
    if (methodPresent(r, m, mode) && r.methodUnavailable[m].empty()) shown.push_back(m);
  std::string out = printfText("\n# %s mode: median us per all-reduce (%d ranks, %s %s)\n#%9s",
                               modeName(mode), r.nranks, dtypeShortName(r.dtype), opName(r.op), "size");
  for (int m : shown) out += printfText(" %16s", kMethods[m].name);
  out += printfText(" %16s\n", "fastest");
  for (size_t bytes : resultSizes(r)) {
    out += printfText(" %9s", formatBytes(bytes).c_str());
    int fastest = -1;
    for (int m : shown) {
      const Point* p = findPoint(r, m, mode, bytes);
      bool wrong = p && p->wrong > 0;
      out += p ? printfText(" %15.2f%s", p->us.median, wrong ? "!" : " ") : printfText(" %16s", "n/a");
      if (p && !wrong && (fastest < 0 || p->us.median < findPoint(r, fastest, mode, bytes)->us.median))
        fastest = m;
    }
    out += printfText(" %16s\n", fastest >= 0 ? kMethods[fastest].name : "-");
  }
  return out;
}

// Speedups and times are positive; 0 stands for "no value" and becomes null.
std::string jsonNumber(double v) {
  if (!std::isfinite(v) || v <= 0) return "null";
  return printfText("%.4f", v);
}

std::string csvField(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += (c == '"') ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

}  // namespace

double algBandwidthGBs(size_t bytes, double us) {
  return us > 0 ? static_cast<double>(bytes) / us / 1e3 : 0.0;
}

double busBandwidthGBs(size_t bytes, double us, int nranks) {
  if (nranks <= 0) return 0.0;
  return algBandwidthGBs(bytes, us) * 2.0 * (nranks - 1) / nranks;
}

const Point* findPoint(const SweepResults& r, int method, Mode mode, size_t bytes) {
  for (const Point& p : r.points)
    if (p.method == method && p.mode == mode && p.bytes == bytes && p.measured) return &p;
  return nullptr;
}

double speedupOver(const SweepResults& r, const Point& p, const char* baselineMethod) {
  int base = methodIndex(baselineMethod);
  if (!p.measured || base < 0 || p.us.median <= 0) return 0.0;
  const Point* b = findPoint(r, base, p.mode, p.bytes);
  return b ? b->us.median / p.us.median : 0.0;
}

int fastestNcclAt(const SweepResults& r, Mode mode, size_t bytes,
                  const std::function<bool(int method)>& eligible, int incumbent, double incumbentUs) {
  int best = incumbent;
  double bestUs = incumbentUs;
  for (int m = 0; m < kNumMethods; ++m) {
    if (!methodIsNccl(m) || !eligible(m)) continue;
    const Point* p = findPoint(r, m, mode, bytes);
    if (!p || p->wrong > 0) continue;
    if (best < 0 || p->us.median < bestUs) {
      best = m;
      bestUs = p->us.median;
    }
  }
  return best;
}

int bestNcclAt(const SweepResults& r, Mode mode, size_t bytes) {
  return fastestNcclAt(r, mode, bytes, [](int) { return true; }, -1, 0.0);
}

Crossover findCrossover(const SweepResults& r, int method, Mode mode) {
  Crossover c;
  c.method = method;
  c.mode = mode;
  bool stillWinning = true;
  for (size_t bytes : resultSizes(r)) {
    const Point* p = findPoint(r, method, mode, bytes);
    int best = bestNcclAt(r, mode, bytes);
    if (!p || best < 0) continue;
    if (!c.compared) c.smallestCompared = bytes;
    c.compared = true;
    c.largestCompared = bytes;
    bool wins = p->wrong <= 0 && p->us.median < findPoint(r, best, mode, bytes)->us.median;
    if (stillWinning && wins) c.winsUpTo = bytes;
    if (!wins && stillWinning) {
      c.firstLoss = bytes;
      stillWinning = false;
    }
  }
  return c;
}

std::vector<size_t> resultSizes(const SweepResults& r) {
  std::vector<size_t> sizes;
  for (const Point& p : r.points) sizes.push_back(p.bytes);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

std::string formatCrossovers(const SweepResults& r) {
  std::string out;
  for (Mode mode : {Mode::Graph, Mode::Eager}) {
    for (int m = 0; m < kNumMethods; ++m) {
      if (methodIsNccl(m) || !methodPresent(r, m, mode)) continue;
      Crossover c = findCrossover(r, m, mode);
      std::string line = printfText("# crossover, %s, %s: ", modeName(mode), kMethods[m].name);
      if (!c.compared)
        line += "no NCCL result at the same sizes to compare with";
      else if (c.winsUpTo == 0)
        line += "never faster than the best NCCL method (loses from " + formatBytes(c.firstLoss) + ")";
      else if (c.firstLoss == 0)
        line += "faster than the best NCCL method at every size up to " + formatBytes(c.largestCompared);
      else
        line += "faster than the best NCCL method up to " + formatBytes(c.winsUpTo) +
                ", not at " + formatBytes(c.firstLoss);
      out += line + "\n";
    }
  }
  return out;
}

std::string formatTables(const SweepResults& r) {
  std::string out = printfText("# allreduce_sweep: %d ranks, %s backend, %s %s; time = median of trials "
                               "(worst rank), min/max over trials\n",
                               r.nranks, r.backend.c_str(), dtypeShortName(r.dtype), opName(r.op));
  for (int m = 0; m < kNumMethods; ++m)
    if (!r.methodUnavailable[m].empty())
      out += printfText("# %s: %s\n", kMethods[m].name, r.methodUnavailable[m].c_str());
  for (Mode mode : {Mode::Graph, Mode::Eager}) {
    if (!modePresent(r, mode)) continue;
    for (int m = 0; m < kNumMethods; ++m)
      if (methodPresent(r, m, mode) && r.methodUnavailable[m].empty()) out += methodBlock(r, m, mode);
    out += comparisonTable(r, mode);
  }
  out += "\n" + formatCrossovers(r);
  return out;
}

std::string toCsv(const SweepResults& r) {
  std::string out =
      "mode,method,bytes,count,type,redop,nranks,time_us,min_us,max_us,q1_us,q3_us,algbw_gbs,"
      "busbw_gbs,wrong,speedup_vs_nccl,speedup_vs_nccl_ring,note\n";
  for (const Point& p : r.points) {
    out += printfText("%s,%s,%zu,%zu,%s,%s,%d,", modeName(p.mode), kMethods[p.method].name, p.bytes,
                      p.count, dtypeShortName(r.dtype), opName(r.op), r.nranks);
    if (p.measured) {
      out += printfText("%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%lld,", p.us.median, p.us.min, p.us.max, p.us.q1,
                        p.us.q3, algBandwidthGBs(p.bytes, p.us.median),
                        busBandwidthGBs(p.bytes, p.us.median, r.nranks), p.wrong);
      for (const char* base : {kBaselineDefault, kBaselineRing}) {
        double s = speedupOver(r, p, base);
        out += (s > 0 ? printfText("%.4f", s) : std::string()) + ",";
      }
    } else {
      out += ",,,,,,,,,,";
    }
    out += csvField(p.note) + "\n";
  }
  return out;
}

// JSON must be UTF-8: a byte that is not part of a valid sequence (a note in
// Latin-1, say) becomes U+FFFD.
std::string jsonEscape(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t length = utf8SequenceAt(text, i);
    if (length == 0) out += "\\ufffd", i += 1;
    else if (length > 1) out += text.substr(i, length), i += length;
    else if (c == '"') out += "\\\"", ++i;
    else if (c == '\\') out += "\\\\", ++i;
    else if (c == '\n') out += "\\n", ++i;
    else if (c < 0x20) out += printfText("\\u%04x", c), ++i;
    else out += static_cast<char>(c), ++i;
  }
  return out;
}

std::string toJson(const SweepResults& r) {
  std::string out = "{\n  \"tool\": \"allreduce_sweep\",\n";
  out += printfText("  \"nranks\": %d,\n  \"backend\": \"%s\",\n  \"dtype\": \"%s\",\n  \"op\": \"%s\",\n",
                    r.nranks, jsonEscape(r.backend).c_str(), dtypeShortName(r.dtype), opName(r.op));
  out += "  \"meta\": {";
  for (size_t i = 0; i < r.meta.size(); ++i)
    out += (i ? ", " : "") + ("\"" + jsonEscape(r.meta[i].first) + "\": \"" + jsonEscape(r.meta[i].second) + "\"");
  out += "},\n  \"methods\": [\n";
  for (int m = 0; m < kNumMethods; ++m) {
    out += printfText("    {\"name\": \"%s\", \"label\": \"%s\", \"nccl\": %s, \"available\": %s, \"reason\": \"%s\"}%s\n",
                      kMethods[m].name, kMethods[m].label, methodIsNccl(m) ? "true" : "false",
                      r.methodUnavailable[m].empty() ? "true" : "false",
                      jsonEscape(r.methodUnavailable[m]).c_str(), m + 1 < kNumMethods ? "," : "");
  }
  out += "  ],\n  \"results\": [\n";
  for (size_t i = 0; i < r.points.size(); ++i) {
    const Point& p = r.points[i];
    out += printfText("    {\"mode\": \"%s\", \"method\": \"%s\", \"bytes\": %zu, \"count\": %zu, \"measured\": %s",
                      modeName(p.mode), kMethods[p.method].name, p.bytes, p.count, p.measured ? "true" : "false");
    if (p.measured) {
      out += ", \"time_us\": " + jsonNumber(p.us.median) + ", \"min_us\": " + jsonNumber(p.us.min) +
             ", \"max_us\": " + jsonNumber(p.us.max) + ", \"q1_us\": " + jsonNumber(p.us.q1) +
             ", \"q3_us\": " + jsonNumber(p.us.q3) + printfText(", \"trials\": %d", p.us.samples) +
             ", \"algbw_gbs\": " + jsonNumber(algBandwidthGBs(p.bytes, p.us.median)) +
             ", \"busbw_gbs\": " + jsonNumber(busBandwidthGBs(p.bytes, p.us.median, r.nranks)) +
             printfText(", \"wrong\": %lld", p.wrong) +
             ", \"speedup_vs_nccl\": " + jsonNumber(speedupOver(r, p, kBaselineDefault)) +
             ", \"speedup_vs_nccl_ring\": " + jsonNumber(speedupOver(r, p, kBaselineRing));
    }
    out += ", \"note\": \"" + jsonEscape(p.note) + "\"}" + (i + 1 < r.points.size() ? ",\n" : "\n");
  }
  out += "  ],\n  \"crossovers\": [\n";
  std::vector<std::string> lines;
  for (Mode mode : {Mode::Graph, Mode::Eager}) {
    for (int m = 0; m < kNumMethods; ++m) {
      if (methodIsNccl(m) || !methodPresent(r, m, mode)) continue;
      Crossover c = findCrossover(r, m, mode);
      lines.push_back(printfText("    {\"mode\": \"%s\", \"method\": \"%s\", \"vs\": \"best-nccl\", "
                                 "\"compared\": %s, \"wins_up_to_bytes\": %zu, \"first_loss_bytes\": %zu}",
                                 modeName(mode), kMethods[m].name, c.compared ? "true" : "false",
                                 c.winsUpTo, c.firstLoss));
    }
  }
  for (size_t i = 0; i < lines.size(); ++i) out += lines[i] + (i + 1 < lines.size() ? ",\n" : "\n");
  out += "  ]\n}\n";
  return out;
}

}  // namespace rcn::bench
