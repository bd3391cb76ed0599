// SPDX-License-Identifier: BSD-3-Clause
#include "unicode_nfc.h"

#include <climits>

#include "model.h"

#ifdef ENGINE_HF_HAVE_ICU
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>
#endif

namespace engine::hf {

#ifdef ENGINE_HF_HAVE_ICU

bool nfcAvailable() { return true; }

std::string toNfc(const std::string& text) {
  if (text.size() > size_t(INT32_MAX / 2)) throw EngineError("text of " + std::to_string(text.size()) +
                                                             " bytes is too long to normalize (NFC)");
  if (text.empty()) return text;
  // The strict converter, not UnicodeString::fromUTF8, which would replace bad
  // bytes with U+FFFD: text that is not UTF-8 goes on as it was, for the
  // pre-tokenizer's error. UTF-16 never takes more units than UTF-8 bytes.
  UErrorCode status = U_ZERO_ERROR;
  icu::UnicodeString in;
  int32_t units = 0;
  UChar* buffer = in.getBuffer(int32_t(text.size()));
  u_strFromUTF8(buffer, in.getCapacity(), &units, text.data(), int32_t(text.size()), &status);
  in.releaseBuffer(U_SUCCESS(status) ? units : 0);
  if (U_FAILURE(status)) return text;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) throw EngineError(std::string("ICU has no NFC data: ") + u_errorName(status));
  if (nfc->isNormalized(in, status) && U_SUCCESS(status)) return text;
  const icu::UnicodeString out = nfc->normalize(in, status);
  if (U_FAILURE(status)) throw EngineError(std::string("NFC normalization failed: ") + u_errorName(status));
  std::string normalized;
  out.toUTF8String(normalized);
  return normalized;
}

#else

bool nfcAvailable() { return false; }
std::string toNfc(const std::string& text) { return text; }

#endif

}  // namespace engine::hf
