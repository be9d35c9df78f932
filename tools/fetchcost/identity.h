// identity: what a client_id label names. A client-id read from the requests; the peer address
// of a connection whose requests cannot be read (opaque TLS: client_id "peer:<ip>"); or nobody
// ("__unattributed__", shown as "-").
#pragma once

#include <string_view>

namespace fc::cli {

inline std::string_view identity_kind(std::string_view client_id) {
  if (client_id == "__unattributed__") return "-";
  if (client_id.starts_with("peer:")) return "peer";
  return "client-id";
}

}  // namespace fc::cli
