from bpfsym.cli import main

raise SystemExit(main())
