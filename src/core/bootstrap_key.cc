// SPDX-License-Identifier: BSD-3-Clause
#include "core/bootstrap_key.h"

#include <sys/stat.h>

#include <string>

#include "core/check.h"
#include "core/params.h"
#include "core/user_file.h"

namespace rcn {

namespace {

// The key file's contents, one trailing newline (as `echo` or an editor
// leaves) dropped.
rcnResult_t readKeyFile(const std::string& path, std::string* key) {
  std::string why;
  RCN_ARG_CHECK(readConfigFile(path, key, &why), "ROCENANTE_BOOTSTRAP_KEY_FILE: %s", why.c_str());
  RCN_ARG_CHECK(key->size() <= kMaxLaunchKeyBytes + 2,
                "ROCENANTE_BOOTSTRAP_KEY_FILE: %s holds %zu bytes; a key has at most %zu", path.c_str(), key->size(),
                kMaxLaunchKeyBytes);
  if (!key->empty() && key->back() == '\n') key->pop_back();
  if (!key->empty() && key->back() == '\r') key->pop_back();
  RCN_ARG_CHECK(key->size() <= kMaxLaunchKeyBytes,
                "ROCENANTE_BOOTSTRAP_KEY_FILE: %s holds %zu bytes; a key has at most %zu", path.c_str(), key->size(),
                kMaxLaunchKeyBytes);
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) && firstTimeInProcess("key-file-mode"))
    RCN_WARN(RCN_LOG_BOOTSTRAP,
             "ROCENANTE_BOOTSTRAP_KEY_FILE: %s is readable by other users (mode %03o); whoever "
             "reads it can join this launch (chmod 600)",
             path.c_str(), static_cast<unsigned>(st.st_mode & 0777));
  return rcnSuccess;
}

}  // namespace

rcnResult_t launchKey(AuthKey* key, bool* configured) {
  const std::string inline_ = paramStr(ParamId::BootstrapKey);
  const std::string path = paramStr(ParamId::BootstrapKeyFile);
  *configured = !inline_.empty() || !path.empty();
  key->bytes.clear();
  RCN_ARG_CHECK(inline_.empty() || path.empty(),
                "ROCENANTE_BOOTSTRAP_KEY and ROCENANTE_BOOTSTRAP_KEY_FILE are both set; set one");
  if (!path.empty()) RCN_CHECK(readKeyFile(path, &key->bytes));
  else key->bytes = inline_;
  RCN_ARG_CHECK(!*configured || key->bytes.size() >= kMinLaunchKeyBytes,
                "%s holds %zu bytes; a bootstrap key needs at least %zu (e.g. `openssl rand -hex 32`)",
                path.empty() ? "ROCENANTE_BOOTSTRAP_KEY" : "ROCENANTE_BOOTSTRAP_KEY_FILE", key->bytes.size(),
                kMinLaunchKeyBytes);
  return rcnSuccess;
}

}  // namespace rcn
