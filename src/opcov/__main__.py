from opcov.cli import main

raise SystemExit(main())
