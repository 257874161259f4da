"""sluice.set_weights' refusals made before any dispatcher is asked: the Python types and values
(TypeError, ValueError) and the library's own check (InvalidArgumentError, a ValueError), each
with its message. The service is an address nothing listens on, so a call that got past the
checks fails with TimeoutError instead: the last tests show that well-formed arguments do."""

import math

import numpy as np
import pytest

import sluice

NOWHERE = "sluice://127.0.0.1:1"


def refused(exc, message, *args, **kwargs):
    with pytest.raises(exc) as e:
        sluice.set_weights(NOWHERE, *args, timeout=0.2, **kwargs)
    assert str(e.value) == message
    return e.value


def test_public():
    assert "set_weights" in sluice.__all__


@pytest.mark.parametrize("job_name, exc, message", [
    (None, TypeError, "job_name must be a str, not NoneType"),
    (7, TypeError, "job_name must be a str, not int"),
    ("", ValueError, "job_name must not be empty"),
])
def test_job_name(job_name, exc, message):
    refused(exc, message, job_name, [1.0])


def test_dataset_id_type():
    refused(TypeError, "dataset_id must be a str, not int", "train", [1.0], dataset_id=3)


@pytest.mark.parametrize("weights, exc, message", [
    (None, TypeError, "weights must be a sequence of numbers (one per input of the mix), not "
                      "NoneType"),
    (0.5, TypeError, "weights must be a sequence of numbers (one per input of the mix), not "
                     "float"),
    ("0.5,0.5", TypeError, "weights must be a sequence of numbers (one per input of the mix), "
                           "not str"),
    ({0.5: 1}, TypeError, "weights must be a sequence of numbers (one per input of the mix), "
                          "not dict"),
    ({0.5, 1}, TypeError, "weights must be a sequence of numbers (one per input of the mix), "
                          "not set"),
    ([0.5, "1"], TypeError, "weights[1] must be a real number, not str"),
    ([True, 1], TypeError, "weights[0] must be a real number, not bool"),
    ([1, 2j], TypeError, "weights[1] must be a real number, not complex"),
    ([], ValueError, "weights must not be empty: one weight per input of the mix"),
    ((0.5, 0.25, -1), ValueError, "weights[2] must be a finite number >= 0, not -1"),
    ([1, math.nan], ValueError, "weights[1] must be a finite number >= 0, not nan"),
    ([math.inf], ValueError, "weights[0] must be a finite number >= 0, not inf"),
    ([0, 0.0, 0], ValueError, "weights must not all be 0"),
])
def test_weights(weights, exc, message):
    refused(exc, message, "train", weights)


@pytest.mark.parametrize("at, exc, message", [
    ("5", TypeError, "at must be an int, not str"),
    (2.0, TypeError, "at must be an int, not float"),
    (True, TypeError, "at must be an int, not bool"),
    (0, ValueError, "at must be an output position between 1 and 18446744073709551615, not 0"),
    (-3, ValueError, "at must be an output position between 1 and 18446744073709551615, not -3"),
    (1 << 64, ValueError, "at must be an output position between 1 and 18446744073709551615, "
                          "not 18446744073709551616"),
])
def test_at(at, exc, message):
    refused(exc, message, "train", [1.0], at=at)


def test_service():
    with pytest.raises(TypeError):
        sluice.set_weights(5050, "train", [1.0])
    with pytest.raises(ValueError):
        sluice.set_weights("nowhere", "train", [1.0])


def test_library_check():
    """What the library refuses itself, before asking the dispatcher."""
    e = refused(sluice.InvalidArgumentError,
                "weights: expected 1 to 64 (one per input of the mix), found 65",
                "train", [1.0] * 65)
    assert isinstance(e, ValueError)
    refused(sluice.InvalidArgumentError, "job name: control character at byte 2",
            "tr\x01in", [1.0])
    refused(sluice.InvalidArgumentError, "dataset id: 130 bytes, longer than the limit of 127",
            "train", [1.0], dataset_id="d" * 130)


@pytest.mark.parametrize("weights", [
    [0.5, 0.5],
    (1, 0, 3),
    np.array([0.9, 0.1]),
    [np.float32(0.25), np.int64(3)],
])
def test_well_formed_arguments_reach_for_the_dispatcher(weights):
    with pytest.raises(sluice.TimeoutError):
        sluice.set_weights(NOWHERE, "train", weights, dataset_id="mix", at=100, timeout=0.2)
