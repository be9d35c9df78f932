#include "kafka/bodies.h"

namespace fc::kafka::bodies {

namespace {

// Newest version Kafka 4.x defines per api key (0..75); -1 = no such key. Used for resync
// plausibility only, so being a little generous is harmless.
constexpr std::int8_t kNewestVersion[] = {
    12, 17, 10, 13, 7, 4, 8, 3, 9, 9,   // 0-9
    6,  9,  4,  5,  5, 6, 5, 1, 4, 7,   // 10-19
    6,  2,  5,  4,  5, 4, 5, 1, 5, 3,   // 20-29
    3,  3,  4,  2,  2, 4, 2, 3, 3, 2,   // 30-39
    2,  3,  2,  2,  1, 1, 0, 0, 1, 1,   // 40-49
    0,  0,  1,  1,  1, 1, 3, 1, 1, -1,  // 50-59
    1,  0,  0,  0,  0, 0, 1, 0, 1, 1,   // 60-69
    0,  0,  0,  0,  0, 0,               // 70-75
};

int newest_version(std::int16_t api_key) {
  if (api_key < 0 || api_key >= static_cast<int>(sizeof(kNewestVersion))) return -1;
  return kNewestVersion[api_key];
}

}  // namespace

bool plausible_api(std::int16_t api_key, std::int16_t version) {
  int newest = newest_version(api_key);
  return newest >= 0 && version >= 0 && version <= newest + 2;
}

bool current_api(std::int16_t api_key, std::int16_t version) {
  if (!plausible_api(api_key, version)) return false;
  switch (api_key) {  // oldest version Kafka 4.0 still accepts (KIP-896)
    case api::kProduce:
      return version >= 3;
    case api::kFetch:
      return version >= 4;
    case 2:  // ListOffsets
    case api::kMetadata:
    case 9:   // OffsetFetch
    case 23:  // OffsetForLeaderEpoch
      return version >= 1;
    case api::kOffsetCommit:
    case api::kJoinGroup:
      return version >= 2;
    default:
      return true;
  }
}

bool decodes(std::int16_t api_key, std::int16_t version) {
  switch (api_key) {
    case api::kFetch:
      return version >= 4 && version <= 17;
    case api::kMetadata:
      return version >= 0 && version <= 13;
    case api::kApiVersions:
      return version >= 0 && version <= 4;
    case api::kJoinGroup:
      return version >= 0 && version <= 9;
    case api::kSyncGroup:
    case api::kLeaveGroup:
      return version >= 0 && version <= 5;
    case api::kHeartbeat:
      return version >= 0 && version <= 4;
    case api::kOffsetCommit:
      return version >= 0 && version <= 9;
    default:
      return false;
  }
}

bool decodes_request_body(std::int16_t api_key, std::int16_t version) {
  if (!decodes(api_key, version)) return false;
  if (api_key == api::kMetadata) return false;  // names asked for; the response says it all
  if (api_key == api::kApiVersions) return version >= 3;
  return true;
}

bool decodes_response_body(std::int16_t api_key, std::int16_t version) {
  if (!decodes(api_key, version)) return false;
  if (api_key == api::kMetadata) return version >= 10;  // earlier versions carry no topic ids
  if (api_key == api::kOffsetCommit) return false;      // no top-level error; group is in request
  return true;
}

bool request_is_flexible(std::int16_t api_key, std::int16_t version) {
  switch (api_key) {
    case api::kFetch:
      return version >= 12;
    case api::kMetadata:
      return version >= 9;
    case api::kApiVersions:
      return version >= 3;
    case api::kJoinGroup:
      return version >= 6;
    case api::kSyncGroup:
    case api::kHeartbeat:
    case api::kLeaveGroup:
      return version >= 4;
    case api::kOffsetCommit:
      return version >= 8;
    default:
      return false;
  }
}

bool response_header_is_flexible(std::int16_t api_key, std::int16_t version) {
  // ApiVersions responses always use header v0 so that clients can parse them before knowing
  // what the broker supports.
  if (api_key == api::kApiVersions) return false;
  return request_is_flexible(api_key, version);
}

namespace {

// The hot loop of the whole decoder: fixed-size partitions read with one bounds check each and
// no per-field checks, specialised per layout so the loop is straight-line code; a partition
// with tagged fields takes the general path.
template <bool kLeaderEpoch, bool kLogStart, bool kFlexible>
bool read_partitions_as(wire::Reader& r, std::uint32_t topic_index, std::uint32_t count,
                        std::vector<FetchPartition>& out) {
  constexpr std::size_t kFixed =
      16 + (kLeaderEpoch ? 4 : 0) + (kFlexible ? 4 : 0) + (kLogStart ? 8 : 0);
  for (std::uint32_t i = 0; i < count; ++i) {
    if (r.remaining() < kFixed + (kFlexible ? 1 : 0)) return false;
    const std::uint8_t* q = r.p;
    // Filled in place: building it on the stack and copying it in stalls on store forwarding.
    FetchPartition& p = out.emplace_back();
    p.topic_index = topic_index;
    p.in_request = true;
    p.partition = static_cast<std::int32_t>(wire::load_be32(q));
    q += 4;
    if constexpr (kLeaderEpoch) {
      p.current_leader_epoch = static_cast<std::int32_t>(wire::load_be32(q));
      q += 4;
    }
    p.fetch_offset = static_cast<std::int64_t>(wire::load_be64(q));
    q += 8;
    if constexpr (kFlexible) q += 4;  // last_fetched_epoch
    if constexpr (kLogStart) q += 8;  // log_start_offset (followers only)
    p.partition_max_bytes = static_cast<std::int32_t>(wire::load_be32(q));
    q += 4;
    r.p = q;
    if constexpr (kFlexible) {
      if (*r.p == 0) {
        ++r.p;  // no tagged fields: the common case
      } else {
        r.skip_tagged_fields();
        if (!r.ok) {
          out.pop_back();
          return false;
        }
      }
    }
  }
  return true;
}

bool read_partitions(wire::Reader& r, std::int16_t v, std::uint32_t topic_index,
                     std::uint32_t count, std::vector<FetchPartition>& out) {
  if (v >= 12) return read_partitions_as<true, true, true>(r, topic_index, count, out);
  if (v >= 9) return read_partitions_as<true, true, false>(r, topic_index, count, out);
  if (v >= 5) return read_partitions_as<false, true, false>(r, topic_index, count, out);
  return read_partitions_as<false, false, false>(r, topic_index, count, out);
}

}  // namespace

bool fetch_request(wire::Reader& r, std::int16_t v, FetchExchange& f) {
  const bool flexible = v >= 12;
  if (flexible) r.skip_tagged_fields();  // request header v2
  if (v <= 14) f.replica_id = r.i32();
  f.max_wait_ms = r.i32();
  f.min_bytes = r.i32();
  f.max_bytes = r.i32();
  f.isolation_level = r.i8();
  if (v >= 7) {
    f.session_id = r.i32();
    f.session_epoch = r.i32();
  } else {
    f.session_id = 0;
    f.session_epoch = -1;
  }
  if (!r.ok) return false;
  // Per-partition size: partition, fetch_offset, max_bytes (+ epochs, log start, tags).
  const std::size_t partition_size = 16 + (v >= 9 ? 4 : 0) + (v >= 12 ? 5 : 0) + (v >= 5 ? 8 : 0);
  std::uint32_t topics = r.array(flexible, 2);
  for (std::uint32_t t = 0; t < topics; ++t) {
    auto topic_index = static_cast<std::uint32_t>(f.topics.size());
    FetchTopic& topic = f.topics.emplace_back();
    if (v >= 13) {
      topic.id = r.uuid();
    } else {
      topic.name = r.string(flexible);
    }
    std::uint32_t partitions = r.array(flexible, partition_size);
    if (!r.ok) return false;
    if (!read_partitions(r, v, topic_index, partitions, f.partitions)) return false;
    if (flexible) r.skip_tagged_fields();
  }
  if (v >= 7) {
    std::uint32_t forgotten = r.array(flexible, 4);
    for (std::uint32_t t = 0; t < forgotten && r.ok; ++t) {
      FetchTopic topic;
      if (v >= 13) {
        topic.id = r.uuid();
      } else {
        topic.name = r.string(flexible);
      }
      std::uint32_t n = r.array(flexible, 4);
      if (!r.ok) return false;
      // Forgotten partitions name topics that may also be in `topics`; keep them separate.
      auto topic_index = static_cast<std::uint32_t>(f.topics.size());
      f.topics.push_back(std::move(topic));
      for (std::uint32_t i = 0; i < n; ++i) {
        FetchPartition p;
        p.topic_index = topic_index;
        p.partition = r.i32();
        f.forgotten.push_back(p);
      }
      if (flexible) r.skip_tagged_fields();
    }
  }
  if (v >= 11) f.rack_id = r.string(flexible);
  if (flexible && r.ok) {
    // Tagged fields: 0 = ClusterId (v12+), 1 = ReplicaState {ReplicaId, ReplicaEpoch} (v15+).
    std::uint32_t n = r.uvarint();
    for (std::uint32_t i = 0; i < n && r.ok; ++i) {
      std::uint32_t tag = r.uvarint();
      std::uint32_t size = r.uvarint();
      if (tag == 1 && v >= 15 && size >= 4 && r.remaining() >= size) {
        wire::Reader state(r.p, r.p + size);
        f.replica_id = state.i32();
      }
      r.skip(size);
    }
  }
  return r.ok;
}

bool group_request(wire::Reader& r, std::int16_t api_key, std::int16_t v, Exchange& ex) {
  const bool flexible = request_is_flexible(api_key, v);
  if (flexible) r.skip_tagged_fields();
  ex.group_id = r.string(flexible);
  switch (api_key) {
    case api::kJoinGroup:
      r.i32();              // session_timeout_ms
      if (v >= 1) r.i32();  // rebalance_timeout_ms
      ex.member_id = r.string(flexible);
      break;
    case api::kSyncGroup:
    case api::kHeartbeat:
      r.i32();  // generation_id
      ex.member_id = r.string(flexible);
      break;
    case api::kOffsetCommit:
      if (v >= 1) {
        r.i32();  // generation_id
        ex.member_id = r.string(flexible);
      }
      break;
    case api::kLeaveGroup:
      if (v <= 2) ex.member_id = r.string(flexible);
      break;
    default:
      break;
  }
  return r.ok;
}

bool api_versions_request(wire::Reader& r, std::int16_t v, Exchange& ex) {
  if (v < 3) return true;
  r.skip_tagged_fields();  // request header v2
  ex.client_software_name = r.string(true);
  ex.client_software_version = r.string(true);
  return r.ok;
}

bool group_response(wire::Reader& r, std::int16_t api_key, std::int16_t v, Exchange& ex) {
  bool throttle = false;
  switch (api_key) {
    case api::kJoinGroup:
      throttle = v >= 2;
      break;
    case api::kSyncGroup:
    case api::kHeartbeat:
    case api::kLeaveGroup:
      throttle = v >= 1;
      break;
    default:
      return true;
  }
  if (throttle) r.i32();
  ex.response_error_code = r.i16();
  return r.ok;
}

bool api_versions_response(wire::Reader& r, Exchange& ex) {
  // The error code leads in every version (a broker that does not know the request's version
  // answers in the v0 layout with UNSUPPORTED_VERSION), so only it is read.
  ex.response_error_code = r.i16();
  return r.ok;
}

}  // namespace fc::kafka::bodies
