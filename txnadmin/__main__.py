"""``python -m txnadmin``: the same CLI as the ``txnadmin`` script, for machines where the venv's bin is not on PATH."""

from .cli.main import main

if __name__ == "__main__":
    main()
