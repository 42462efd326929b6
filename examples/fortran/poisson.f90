! autopcg from Fortran: the 2D Poisson matrix of examples/c/poisson.c (5-point stencil on an
! m x m grid), given here as its lower triangle in 1-based CSR arrays with 64-bit indices;
! three right-hand sides (the columns of b(n, 3)) solved on one handle, then new values of the
! same pattern (a shift added to the diagonal) and the three solved again.
!
!     make -C examples fortran && examples/build/poisson_f90 [m] [auto|cpu|gpu]
!
! Prints one line per solve, as the C example does.
program poisson
  use iso_c_binding
  use autopcg
  implicit none

  integer, parameter :: nrhs = 3
  real(c_double), parameter :: shift = 0.5d0
  integer(c_int64_t) :: m, n, nnz, i, r, c, k
  integer(c_int64_t), allocatable :: indptr(:), indices(:)
  real(c_double), allocatable :: values(:), b(:, :), x(:, :)
  type(autopcg_options) :: opts
  type(autopcg_info) :: info(nrhs)
  type(autopcg_setup) :: setup
  type(c_ptr) :: s
  character(len=16) :: arg

  m = 64
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) m
  end if
  if (m < 2) stop "usage: poisson_f90 [m >= 2] [auto|cpu|gpu]"
  n = m * m

  call check(autopcg_options_init(opts), "autopcg_options_init")
  opts%rtol = 1d-10
  opts%storage = AUTOPCG_STORAGE_LOWER
  if (command_argument_count() >= 2) then
    call get_command_argument(2, arg)
    select case (trim(arg))
    case ("cpu")
      opts%device = AUTOPCG_DEVICE_CPU
    case ("gpu")
      opts%device = AUTOPCG_DEVICE_GPU
    case ("auto")
    case default
      stop "device: expected auto, cpu or gpu"
    end select
  end if
  ! The GPU's context is created while the matrix is assembled below.
  if (opts%device /= AUTOPCG_DEVICE_CPU) then
    call check(autopcg_open_gpu_ahead(0_c_int), "autopcg_open_gpu_ahead")
  end if

  ! The lower triangle (column <= row), 1-based, rows in order.
  allocate (indptr(n + 1), indices(3 * n), values(3 * n))
  nnz = 0
  indptr(1) = 1
  do i = 1, n
    r = (i - 1) / m
    c = mod(i - 1, m)
    if (r > 0) call push(i - m, -1d0)
    if (c > 0) call push(i - 1, -1d0)
    call push(i, 4d0)
    indptr(i + 1) = nnz + 1
  end do

  call check(autopcg_create(n, indptr, indices, values, 1_c_int, opts, s), "autopcg_create")
  call check(autopcg_get_setup(s, setup), "autopcg_get_setup")
  print '("autopcg ", a, " on ", a, ", preconditioner ", a)', autopcg_version_string(), &
    autopcg_device_name(s), autopcg_precond_name(s)
  print '("2D Poisson ", i0, " x ", i0, ": n = ", i0, ", nnz = ", i0, " (lower triangle), setup ", f0.2, " ms")', &
    m, m, n, nnz, setup%total_ms

  ! Columns of b: all ones, a ramp, a point source in the middle of the grid.
  allocate (b(n, nrhs), x(n, nrhs))
  b = 0
  x = 0
  do i = 1, n
    b(i, 1) = 1
    b(i, 2) = real(mod(i - 1, m) + 1, c_double) / m
  end do
  b((m / 2) * m + m / 2 + 1, 3) = 1

  call check(autopcg_solve_many(s, int(nrhs, c_int64_t), b, x, info=info), "autopcg_solve_many")
  do k = 1, nrhs
    print '("A rhs ", i0, ": ", i0, " iterations, relative residual ", es9.3)', k, &
      info(k)%iterations, info(k)%relative_residual
  end do

  ! New values, same pattern and storage: A + shift I.
  do i = 1, n
    do k = indptr(i), indptr(i + 1) - 1
      if (indices(k) == i) values(k) = values(k) + shift
    end do
  end do
  call check(autopcg_update_values(s, values), "autopcg_update_values")
  do k = 1, nrhs
    ! One right-hand side at a time, from the previous solution.
    call check(autopcg_solve(s, b(:, k), x(:, k), x0=x(:, k), info=info(k)), "autopcg_solve")
    print '("A+", f3.1, "I rhs ", i0, ": ", i0, " iterations, relative residual ", es9.3)', &
      shift, k, info(k)%iterations, info(k)%relative_residual
  end do

  call autopcg_destroy(s)
  s = c_null_ptr

contains

  subroutine push(col, v)
    integer(c_int64_t), intent(in) :: col
    real(c_double), intent(in) :: v
    nnz = nnz + 1
    indices(nnz) = col
    values(nnz) = v
  end subroutine push

  subroutine check(status, what)
    integer(c_int), intent(in) :: status
    character(len=*), intent(in) :: what
    if (status /= AUTOPCG_OK) then
      write (0, '(a, ": ", a, ": ", a)') what, autopcg_status_name(status), &
        autopcg_error_message()
      error stop 1
    end if
  end subroutine check

end program poisson
