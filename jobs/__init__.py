"""Ray side of streamgen: model actors, scheduler, scoring tasks, shard writer, driver.

Importing ``jobs`` sets Ray's loopback/quiet environment defaults (see :mod:`jobs.run.local_ray`): Ray
reads some of them once, when it is first imported, so they must be in place before any module
here imports ``ray``. Explicitly set variables are left as they are.
"""

from jobs.run.local_ray import set_env_defaults

set_env_defaults()
