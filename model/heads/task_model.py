"""`BertTaskModel`: what every head-over-encoder model shares, its serialisation.

Like keras-hub's `Task`: `get_config` returns the constructor's arguments
with the encoder serialised, and `from_config` rebuilds with `cls(**config)`,
so a reloaded `.keras` file is the right class again. A subclass only lists
its own arguments in `head_config()`.
"""

from __future__ import annotations

import keras


class BertTaskModel(keras.Model):
    """Base class of `BertPretrainer`, `BertClassifier` and the other heads; its
    subclasses keep their encoder as `self.encoder`."""

    def head_config(self) -> dict:
        """The subclass's constructor arguments other than the encoder."""
        return {}

    # === Config ===
    def get_config(self):
        return {
            "encoder": keras.layers.serialize(self.encoder),
            **self.head_config(),
            "name": self.name,
            "trainable": self.trainable,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.layers.deserialize(config["encoder"])
        return cls(**config)
