"""sluice.run of mixed datasets: sample_from_datasets and choose_from_datasets."""

import pytest

import sluice

MIX = ("sample_from_datasets([(range(30)), (range(100, 105)), (range(200, 260))], "
       "[0.5, 0.2, 0.3], 11)")


def test_sample_reads_every_weighted_element_once_in_a_fixed_order():
    first = [int(x) for x in sluice.run(MIX)]
    assert sorted(first) == list(range(30)) + list(range(100, 105)) + list(range(200, 260))
    assert [int(x) for x in sluice.run(MIX)] == first
    assert first != sorted(first)


def test_ops_after_the_mix_apply_to_the_mixed_stream():
    got = [int(x) for x in sluice.run(MIX + " | map(add, 1000) | take(3)")]
    want = [int(x) + 1000 for x in sluice.run(MIX)][:3]
    assert got == want


def test_choose_follows_the_choices():
    got = [bytes(x).decode() for x in sluice.run(
        'choose_from_datasets([(list("foo") | repeat()), (list("bar") | repeat())], '
        '(list(0, 1, 1, 0)))')]
    assert got == ["foo", "bar", "bar", "foo"]


def test_choice_out_of_range_is_an_error():
    with pytest.raises(Exception, match=r"the choice at position 1 is 5, not an input index"):
        list(sluice.run("choose_from_datasets([(range(3))], (list(0, 5)))"))
