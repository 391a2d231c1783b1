#include "kiln/session.hpp"

#include "kiln/function.hpp"
#include "kiln/random.hpp"
#include "kiln/variable_store.hpp"
#include "state/names.hpp"

namespace kiln {

void clear_session() {
  clear_caches();
  detail::reset_unique_names();
  detail::clear_collections();
  default_variable_store().clear();
  random::set_global_seed(random::global_seed());
}

}  // namespace kiln
