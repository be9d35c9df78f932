// Internal: Metadata response v10–v13 (the versions that carry topic ids). Included by bodies.h.
#pragma once

namespace fc::kafka::bodies {

template <typename Learn>
bool metadata_response(wire::Reader& r, std::int16_t version, Exchange& ex, Learn&& learn) {
  const bool flexible = version >= 9;
  if (version >= 3) r.i32();  // throttle_time_ms
  std::uint32_t brokers = r.array(flexible, 10);
  for (std::uint32_t i = 0; i < brokers && r.ok; ++i) {
    r.i32();                               // node_id
    r.string(flexible);                    // host
    r.i32();                               // port
    if (version >= 1) r.string(flexible);  // rack (nullable)
    if (flexible) r.skip_tagged_fields();
  }
  if (version >= 2) r.string(flexible);  // cluster_id (nullable)
  if (version >= 1) r.i32();             // controller_id
  std::uint32_t topics = r.array(flexible, 4);
  for (std::uint32_t t = 0; t < topics && r.ok; ++t) {
    r.i16();  // error_code
    bool name_null = false;
    std::string_view name = r.string(flexible, &name_null);
    Uuid id;
    if (version >= 10) id = r.uuid();
    if (version >= 1) r.i8();  // is_internal
    std::uint32_t partitions = r.array(flexible, 10);
    for (std::uint32_t p = 0; p < partitions && r.ok; ++p) {
      r.i16();                                                // error_code
      r.i32();                                                // partition_index
      r.i32();                                                // leader_id
      if (version >= 7) r.i32();                              // leader_epoch
      r.skip(4ull * r.array(flexible, 4));                    // replica_nodes
      r.skip(4ull * r.array(flexible, 4));                    // isr_nodes
      if (version >= 5) r.skip(4ull * r.array(flexible, 4));  // offline_replicas
      if (flexible) r.skip_tagged_fields();
    }
    if (version >= 8) r.i32();  // topic_authorized_operations
    if (flexible) r.skip_tagged_fields();
    if (!r.ok) break;
    ++ex.metadata_topics;
    if (!name_null && !name.empty() && !id.is_zero()) learn(id, name);
  }
  return r.ok;
}

}  // namespace fc::kafka::bodies
