// InferenceModel: a Hugging Face checkpoint loaded whole onto one device for forward-only use
// (`shardtrain eval`, `shardtrain generate`). Parameters only: no gradients or moments.
#pragma once

#include <memory>
#include <string>

#include "model/decoder_model.h"
#include "ops/backend.h"
#include "ops/ops.h"
#include "train/local_units.h"

namespace shardtrain {

struct InferenceModel {
  std::unique_ptr<Ops> ops;
  std::unique_ptr<DecoderModel> model;
  std::unique_ptr<LocalUnits> units;
};

// Opens DIR (config.json + safetensors), builds the backend for `device` and
// uploads the weights. With adapter_dir (a PEFT LoRA adapter, `--adapter`): the model runs the
// base with the adapters on its Linears, unmerged, as in training (model/peft_adapter.h).
// Throws Error naming the file for any checkpoint or adapter problem.
InferenceModel load_inference_model(const std::string& model_dir, DeviceChoice device,
                                    const std::string& adapter_dir = "");

}  // namespace shardtrain
