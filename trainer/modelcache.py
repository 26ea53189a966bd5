"""The job process's models in memory: one template per model name, policies by weights hash.

A worker pays for loading a policy once per version: generate and verify jobs of one version share
it, and a full cache hands its oldest model over to the next version (loading weights into it costs
a fraction of copying the template).
"""

from __future__ import annotations

import copy
from collections import OrderedDict

import torch

from trainer.blobdir import BlobDir
from trainer.policy import base_model, load_state, load_weights
from trainer.versions import Versions

POLICY_CACHE = 3  # policies kept in memory: the current version and an async window of 2


class ModelCache:
    def __init__(self, blobs: BlobDir, versions: Versions, device: torch.device) -> None:
        self.blobs, self.versions, self.device = blobs, versions, device
        self._templates: dict[str, tuple] = {}  # model name -> (model, tokenizer), weights irrelevant
        self._policies: OrderedDict[bytes, tuple] = OrderedDict()  # weights hash -> (model, tokenizer)

    def template(self, name: str) -> tuple:
        """(model, tokenizer) of model `name` on this process's device; its weights are whatever
        it was created with: copy it before loading any."""
        if name not in self._templates:
            model, tokenizer = base_model(name, 0)
            self._templates[name] = (model.to(self.device), tokenizer)
        return self._templates[name]

    def adopt_template(self, name: str, model, tokenizer) -> None:
        """Use a model init just built as `name`'s template, unless there is one already."""
        self._templates.setdefault(name, (model, tokenizer))

    def policy(self, name: str, digest: bytes) -> tuple:
        """(model, tokenizer) of model `name` with the weights blob `digest` loaded, in eval mode."""
        digest = bytes(digest)
        if digest in self._policies:
            self._policies.move_to_end(digest)
            return self._policies[digest]
        template, tokenizer = self.template(name)
        reuse = self._policies.popitem(last=False)[1] if len(self._policies) >= POLICY_CACHE else None
        model = reuse[0] if reuse is not None and reuse[1] is tokenizer else copy.deepcopy(template)
        unpacked = self.versions.unpacked(digest)  # just rebuilt by an unpack job here: already parsed
        if unpacked is not None:
            load_state(model, unpacked)
        else:
            load_weights(model, self.blobs.read(digest, "policy weights"))
        return self.remember(digest, model.eval(), tokenizer)

    def remember(self, digest: bytes, model, tokenizer) -> tuple:
        """Cache `model` as the policy of weights `digest` (evicting the oldest past POLICY_CACHE)."""
        self._policies[digest] = (model, tokenizer)
        while len(self._policies) > POLICY_CACHE:
            self._policies.popitem(last=False)
        return model, tokenizer
