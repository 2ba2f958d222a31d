"""The build backend of `pip install ./python`: setuptools', run so that it
finds the torch that chorus_torch will run with. pip builds in an isolated
environment without the packages already installed; torch is not declared
as a build requirement (pip would fetch another copy, maybe another
version, whose C++ ABI the extension would then have), so the site-packages
of the interpreter that runs pip join the path instead."""
import site
import sys

for _path in site.getsitepackages() + [site.getusersitepackages()]:
    if _path not in sys.path:
        sys.path.append(_path)

from setuptools.build_meta import *  # noqa: E402,F401,F403
