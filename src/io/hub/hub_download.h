// Downloads one blob into the Hub cache (io/hub/hub_cache.h), the way huggingface_hub does and
// then some:
//   - under the blob's lock (.locks/models--org--name/<etag>.lock): one downloader per node;
//     the others wait and then find the blob there;
//   - into blobs/<etag>.incomplete, resumed with "Range: bytes=N-" after an interruption, in
//     this run (a few retries of a dropped or stalled connection) or the next one;
//   - verified before it is used: LFS files by the sha256 of their content (their ETag), every
//     file by its size; a file that grows past the size the Hub announced is stopped there;
//   - renamed to blobs/<etag> only when complete and verified (fsync first).
// Failures are one-line Errors; what stays in the cache is either a complete blob or a
// resumable .incomplete (a corrupt download is deleted). A full disk (ENOSPC, or EFBIG under a
// file size limit) names the path and the space needed; the free space is checked first.
#pragma once

#include <cstdint>
#include <string>

#include "io/hub/hub_api.h"
#include "io/hub/hub_cache.h"

namespace shardtrain {

struct HubBlob {
  std::string file;    // the repo file name, for messages
  std::string url;     // where the bytes are (the CDN location, or the resolve URL)
  std::string etag;    // the blob's name in the cache
  uint64_t size = 0;   // exact
  std::string sha256;  // lowercase hex; "" = verify by size only
};

void download_blob(const HubTarget& target, const HubCacheRepo& repo, const HubBlob& blob);

// The lowercase hex sha256 of the file at `path` (throws Error naming it when unreadable).
std::string file_sha256(const std::string& path);

}  // namespace shardtrain
