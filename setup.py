"""Packaging glue pyproject.toml cannot express: `autotune_configs/` lives at
the repository top (one place to edit; source checkouts and editable installs
read it there) and ships inside wheels as `kunlun_triton/autotune_configs/`."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["kunlun_triton*"]) + ["kunlun_triton.autotune_configs"],
    package_dir={"kunlun_triton.autotune_configs": "autotune_configs"},
    package_data={"kunlun_triton.autotune_configs": ["*.yaml"]},
)
