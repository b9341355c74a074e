"""What a model predicts: the :class:`Task` that decides how its predictions are summarised and its data checked.

Example
-------
>>> Task("classification") is Task.CLASSIFICATION, Task.CLASSIFICATION == "classification"
(True, True)
>>> [t.value for t in Task if t.has_input_features]
['regression', 'binary', 'classification']
"""

from __future__ import annotations

import enum

__all__ = ["Task"]


class Task(str, enum.Enum):
    """What a model predicts.  A ``str`` enum: it compares equal to, and is written to files as, its value."""

    #: a real target: predictive mean, sd, interval; targets standardised with the inputs where the model asks
    REGRESSION = "regression"
    #: 0/1 outcomes (the coin): the probability of a one
    BINARY = "binary"
    #: class labels 0 .. C-1: probabilities and the entropy split of the predictive
    CLASSIFICATION = "classification"
    #: no target: a generative model of the columns themselves (a VAE's pixels)
    DENSITY = "density"
    #: class labels where known, a generative model of the columns everywhere (the semi-supervised VAE)
    SEMI_SUPERVISED = "semi-supervised"

    def __str__(self) -> str:
        return self.value

    @property
    def has_input_features(self) -> bool:
        """The columns are inputs (a constant one carries no information), not the data a model generates."""
        return self in (Task.REGRESSION, Task.BINARY, Task.CLASSIFICATION)

    @property
    def stratified(self) -> bool:
        """A held-out split keeps the classes' proportions."""
        return self is Task.CLASSIFICATION
