#include "common/hmac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

namespace bpftrain {

Mac hmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> message) {
  Mac mac{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), int(key.size()), message.data(), message.size(), mac.data(), &len);
  return mac;
}

bool macEqual(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::optional<std::string> readSecretFile(const std::string& path, std::string& error) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    error = "secret file " + path + " not found: create it with `head -c 32 /dev/urandom > " +
            path + " && chmod 600 " + path + "`";
    return std::nullopt;
  }
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    error = "secret file " + path + " is readable by group or others: run `chmod 600 " + path + "`";
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string secret = ss.str();
  if (secret.empty()) {
    error = "secret file " + path + " is empty";
    return std::nullopt;
  }
  return secret;
}

}  // namespace bpftrain
