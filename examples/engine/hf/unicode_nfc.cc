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

namespace {

// ICU's UTF-8 reader replaces bad bytes with U+FFFD; asking the strict
// converter first keeps them for the pre-tokenizer's error.
bool validUtf8(const std::string& text) {
  UErrorCode status = U_ZERO_ERROR;
  int32_t units = 0;
  u_strFromUTF8(nullptr, 0, &units, text.data(), int32_t(text.size()), &status);
  return status == U_BUFFER_OVERFLOW_ERROR || U_SUCCESS(status);
}

}  // namespace

std::string toNfc(const std::string& text) {
  if (text.size() > size_t(INT32_MAX / 2)) throw EngineError("text of " + std::to_string(text.size()) +
                                                             " bytes is too long to normalize (NFC)");
  if (!validUtf8(text)) return text;
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) throw EngineError(std::string("ICU has no NFC data: ") + u_errorName(status));
  const icu::UnicodeString in = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), int32_t(text.size())));
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
