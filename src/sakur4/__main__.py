from sakur4.cli import main

main()
