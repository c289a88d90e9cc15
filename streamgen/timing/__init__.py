"""The timing model (torch-free): when segments arrive (timeline, granularity), which prefix is drafted next and
what the user waits (policies), and what a step costs in wall seconds (costmodel). Shared by the live run and analysis."""
