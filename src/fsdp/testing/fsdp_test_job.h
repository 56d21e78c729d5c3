// The job the FSDP equivalence tests train (header-only; tests only): tests/golden/llama_gqa from
// its pretrained weights on 40 generated sequences of varying length, some labels masked, so that
// ranks see different target counts and the global-count loss normalisation matters; a global
// batch of 4 (micro-batch 1), so any world size 1, 2, 4 sees the same batches.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace shardtrain::testing {

// Writes DIR/data.jsonl and DIR/job.toml for `steps` steps on `device` ("cpu" or "cuda").
inline void write_fsdp_test_job(const std::string& dir, int steps, const std::string& device) {
  std::mt19937 rng(11);
  std::ofstream data(dir + "/data.jsonl");
  for (int line = 0; line < 40; ++line) {
    const int length = 6 + static_cast<int>(rng() % 11);
    nlohmann::json ids = nlohmann::json::array(), labels = nlohmann::json::array();
    for (int i = 0; i < length; ++i) {
      const int id = static_cast<int>(rng() % 96);
      ids.push_back(id);
      labels.push_back(i < 2 && line % 3 == 0 ? -100 : id);
    }
    data << nlohmann::json{{"input_ids", ids}, {"labels", labels}}.dump() << "\n";
  }
  std::ofstream toml(dir + "/job.toml");
  toml << "[model]\npath = \"" << SHARDTRAIN_SOURCE_DIR << "/tests/golden/llama_gqa\"\n"
       << "init = \"pretrained\"\ndtype = \"fp32\"\n"
       << "[data]\npath = \"" << dir << "/data.jsonl\"\nseq_len = 16\n"
       << "[train]\nsteps = " << steps << "\nmicro_batch = 1\nglobal_batch = 4\nseed = 7\n"
       << "device = \"" << device << "\"\nmax_grad_norm = 1.0\n"
       << "[optim]\nlr = 3e-3\nwarmup_steps = 2\nweight_decay = 0.01\n";
}

}  // namespace shardtrain::testing
