#include "collector/controller/policy.h"

#include "collector/controller/bandit_policy.h"
#include "collector/controller/rules_policy.h"

namespace bpftrain::collector::controller {

std::string armName(const Arm& a) {
  return std::string(topologyName(a.topology)) + "/" + std::string(pinModeName(a.pinning));
}

std::unique_ptr<Policy> makePolicy(std::string_view name) {
  if (name == "rules") return std::make_unique<RulesPolicy>();
  if (name == "bandit") return std::make_unique<BanditPolicy>();
  return nullptr;
}

}  // namespace bpftrain::collector::controller
