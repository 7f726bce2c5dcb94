"""`imagekit export`: an image's root filesystem for HPC runtimes without Docker (Charliecloud's
`ch-run`, enroot, Apptainer), as a folder or a squashfs file."""
