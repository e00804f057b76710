"""A CNN with BatchNorm written with gc.nn (PyTorch style), exported for inference and as a training step.

    gcompile build examples/nn_cnn.py -o build --check

The training step carries BatchNorm's running statistics (inputs "bn1.running_mean", ..., outputs
"bn1.running_mean.new", ...) beside the parameters and the optimizer state; gc.runtime.Trainer
keeps them on the device, and `model.load_state_dict(trainer.state_dict())` takes them back.
"""
import gcompile as gc
import gcompile.functions as F
from gcompile import nn

nn.init.seed(0)


class Net(nn.Module):
    def __init__(self):
        self.conv1, self.bn1 = nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(F.flatten(x))


model = Net()
inference = model.replace({}).eval()        # a copy in eval mode: BatchNorm uses the running statistics
IMAGES = gc.spec(("batch", 1, 28, 28), "float32")


@gc.export(x=IMAGES)
def predict(x):
    """Class probabilities; the initializers are named conv1.weight, bn1.running_mean, ..."""
    return F.softmax(inference(x), axis=-1)


@gc.export_train(params=model, optimizer=gc.optim.SGD(0.05, momentum=0.9), x=IMAGES,
                 labels=gc.spec(("batch",), "int64"), name="train_step")
def loss(m, x, labels):
    return F.softmax_cross_entropy(m(x), labels)
