"""One +- convention: mean and sample standard deviation over seeds, one Markdown-table writer."""

import numpy as np

from tff_radiomap.metrics import over_seeds


def test_mean_std_is_the_sample_standard_deviation_of_the_finite_values():
    values = [3.0, 5.0, 10.0, float("nan")]
    mean, std = over_seeds.mean_std(values)
    assert mean == np.mean(values[:3]) and std == np.std(values[:3], ddof=1)
    assert std > np.std(values[:3])  # Not the population one, which reads small for few seeds.
    one = over_seeds.mean_std([4.0, None])
    assert one[0] == 4.0 and np.isnan(one[1])  # One seed says nothing about the spread.
    assert all(np.isnan(over_seeds.mean_std([])))


def test_cells_and_table_say_the_convention():
    assert over_seeds.plus_minus("1.00", np.sqrt(2)) == "1.00 +- 1.41"
    assert over_seeds.plus_minus("1.00", float("nan")) == "1.00 +- n/a"
    assert over_seeds.plus_minus("1", 2.5, lambda v: f"{v:.0f}") == "1 +- 2"
    table = over_seeds.markdown_table(("a", "b"), [("1", "2 +- 1")], "Title", [over_seeds.std_note(3)])
    assert (
        table
        == "Title\n\n| a | b |\n| --- | --- |\n| 1 | 2 +- 1 |\n\n+- is the sample standard deviation (ddof = 1) over 3 seeds; n/a where fewer than two seeds have a value.\n"
    )
    assert "over 1 seed;" in over_seeds.std_note(1)
