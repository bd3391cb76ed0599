# SPDX-License-Identifier: BSD-3-Clause
import os
import sys

# ranks.py and rank_scenarios.py sit beside the tests.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs CUDA GPUs (skips without them)")
