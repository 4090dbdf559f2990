"""The paper's experiments as data, their runner, results, report and figures."""
