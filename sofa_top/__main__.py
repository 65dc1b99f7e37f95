from sofa_top.cli import main

raise SystemExit(main())
