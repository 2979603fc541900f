// Trains a small MLP on npu:0 with libtorch's C++ API. The npu device is used like any other: torch::Device("npu:0"),
// module->to(device), tensor.to(device); softnpu::init() is the only softnpu call it needs.
//
// The task: points in the plane, labelled by whether they lie inside the unit circle (a boundary a linear model
// cannot draw). Exits 0 only if the loss went down and the model's parameters live on npu:0.
#include <softnpu/softnpu.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <exception>

int main() {
  try {
    softnpu::init();  // starts the device, and makes the program link softnpu's backend (see softnpu/softnpu.h)
    const torch::Device device("npu:0");
    torch::manual_seed(0);

    // Synthetic data, made on the host and copied to the device once.
    const auto points = torch::randn({1024, 2}) * 1.2;
    const auto labels = (points.pow(2).sum(1) < 1.0).to(torch::kLong);
    const auto x = points.to(device);
    const auto y = labels.to(device);

    torch::nn::Sequential model(torch::nn::Linear(2, 32), torch::nn::ReLU(), torch::nn::Linear(32, 32),
                                torch::nn::ReLU(), torch::nn::Linear(32, 2));
    model->to(device);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));

    constexpr int kSteps = 300;
    float first_loss = NAN, loss_value = NAN, accuracy = NAN;
    for (int step = 0; step <= kSteps; ++step) {
      optimizer.zero_grad();
      const auto logits = model->forward(x);
      const auto loss = torch::nn::functional::cross_entropy(logits, y);
      loss.backward();
      optimizer.step();
      if (step % 50 == 0) {  // .item() waits for the device: only now and then
        loss_value = loss.item<float>();
        accuracy = logits.argmax(1).eq(y).to(torch::kFloat).mean().item<float>();
        if (step == 0) first_loss = loss_value;
        std::printf("step %3d  loss %.4f  accuracy %.3f\n", step, loss_value, accuracy);
      }
    }
    softnpu::synchronize();

    bool ok = true;
    if (!(loss_value < first_loss)) {
      std::printf("FAIL: the loss did not go down (%.4f -> %.4f)\n", first_loss, loss_value);
      ok = false;
    }
    for (const auto& p : model->named_parameters()) {
      if (p.value().device() != device) {
        std::printf("FAIL: parameter %s is on %s, not %s\n", p.key().c_str(), p.value().device().str().c_str(),
                    device.str().c_str());
        ok = false;
      }
    }
    if (ok)
      std::printf("OK: loss %.4f -> %.4f, accuracy %.3f, %zu parameters on %s\n", first_loss, loss_value, accuracy,
                  model->parameters().size(), device.str().c_str());
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
