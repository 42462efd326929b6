! Fortran interface of autopcg (libautopcg): the calls of include/autopcg.h, through
! iso_c_binding. Compile this file with the program and link with -lautopcg:
!
!     gfortran -c autopcg.f90
!     gfortran prog.f90 autopcg.o -L<dir of libautopcg.so> -lautopcg -Wl,-rpath,<same dir>
!
! Indices start at 1 when `base` is 1 (the usual Fortran CSR arrays) or 0; 32-bit
! (integer(c_int32_t)) and 64-bit (integer(c_int64_t)) arrays go through the one generic name
! autopcg_create. A handle is a type(c_ptr); every function returns AUTOPCG_OK (0) or an
! AUTOPCG_ERR_* code, and autopcg_error_message() gives the message of this thread's last
! failed call. Arguments marked optional may be left out (C receives NULL).
!
! Multiple right-hand sides: b(n, nrhs) and x(n, nrhs), one column per right-hand side.
! A handle may be used from any thread, by one thread at a time.
!
! The constants and the bind(C) names here are checked against the header by the crate's tests.
module autopcg
  use iso_c_binding
  implicit none
  private

  ! Status codes.
  integer(c_int), parameter, public :: AUTOPCG_OK = 0
  integer(c_int), parameter, public :: AUTOPCG_ERR_BAD_INPUT = 1
  integer(c_int), parameter, public :: AUTOPCG_ERR_NOT_CONVERGED = 2
  integer(c_int), parameter, public :: AUTOPCG_ERR_NOT_SPD = 3
  integer(c_int), parameter, public :: AUTOPCG_ERR_DEVICE = 4
  integer(c_int), parameter, public :: AUTOPCG_ERR_INTERNAL = 5

  ! Preconditioners (options%precond).
  integer(c_int), parameter, public :: AUTOPCG_PRECOND_NONE = 0
  integer(c_int), parameter, public :: AUTOPCG_PRECOND_JACOBI = 1
  integer(c_int), parameter, public :: AUTOPCG_PRECOND_SSOR_AI = 2
  integer(c_int), parameter, public :: AUTOPCG_PRECOND_SSOR_AI2 = 3

  ! Devices (options%device).
  integer(c_int), parameter, public :: AUTOPCG_DEVICE_AUTO = 0
  integer(c_int), parameter, public :: AUTOPCG_DEVICE_CPU = 1
  integer(c_int), parameter, public :: AUTOPCG_DEVICE_GPU = 2

  ! What the arrays hold (options%storage).
  integer(c_int), parameter, public :: AUTOPCG_STORAGE_FULL = 0
  integer(c_int), parameter, public :: AUTOPCG_STORAGE_LOWER = 1
  integer(c_int), parameter, public :: AUTOPCG_STORAGE_UPPER = 2

  ! Why a solve stopped (info%reason).
  integer(c_int), parameter, public :: AUTOPCG_REASON_NONE = -1
  integer(c_int), parameter, public :: AUTOPCG_REASON_CONVERGED = 0
  integer(c_int), parameter, public :: AUTOPCG_REASON_MAX_ITER = 1
  integer(c_int), parameter, public :: AUTOPCG_REASON_STAGNATED = 2
  integer(c_int), parameter, public :: AUTOPCG_REASON_NOT_SPD = 3
  integer(c_int), parameter, public :: AUTOPCG_REASON_BREAKDOWN = 4
  integer(c_int), parameter, public :: AUTOPCG_REASON_STOPPED = 5

  ! Options of a handle: fill with autopcg_options_init, then change what you need. `model`
  ! is c_null_ptr (automatic) or c_loc of a NUL-terminated character variable that lives
  ! until autopcg_create returns ("none", "auto" or a file path, followed by c_null_char).
  type, bind(C), public :: autopcg_options
    integer(c_int) :: precond
    integer(c_int) :: device
    integer(c_int) :: storage
    integer(c_int) :: check_symmetry
    real(c_double) :: rtol
    real(c_double) :: atol
    real(c_double) :: omega
    integer(c_int64_t) :: max_iter
    type(c_ptr) :: model
    integer(c_int) :: blocks
    integer(c_int) :: gpus
  end type autopcg_options

  ! What a solve did.
  type, bind(C), public :: autopcg_info
    integer(c_int64_t) :: iterations
    integer(c_int) :: converged
    integer(c_int) :: reason
    real(c_double) :: relative_residual
    real(c_double) :: solve_ms
    real(c_double) :: setup_ms
  end type autopcg_info

  ! Where the setup time of a handle went, in milliseconds.
  type, bind(C), public :: autopcg_setup
    real(c_double) :: check_ms
    real(c_double) :: device_ms
    real(c_double) :: precond_ms
    real(c_double) :: select_ms
    real(c_double) :: backend_ms
    real(c_double) :: total_ms
    real(c_double) :: update_ms
    real(c_double) :: upload_ms
    real(c_double) :: convert_ms
    real(c_double) :: load_ms
  end type autopcg_setup

  public :: autopcg_options_init, autopcg_create, autopcg_create_i32, autopcg_create_i64
  public :: autopcg_solve, autopcg_solve_many, autopcg_update_values
  public :: autopcg_set_tolerances, autopcg_set_max_iter
  public :: autopcg_get_n, autopcg_get_nnz, autopcg_get_info, autopcg_get_iterations
  public :: autopcg_get_residual, autopcg_get_setup, autopcg_destroy
  public :: autopcg_device, autopcg_precond, autopcg_last_error, autopcg_status_string
  public :: autopcg_version, autopcg_open_gpu_ahead, autopcg_open_gpu_ahead_for, &
            autopcg_finish_opens_ahead
  ! The C strings above as Fortran strings.
  public :: autopcg_error_message, autopcg_device_name, autopcg_precond_name
  public :: autopcg_status_name, autopcg_version_string

  ! Creates a handle from CSR arrays (copied) and sets it up: indptr(n+1), indices and
  ! values of indptr(n+1) - base entries; base 1 (Fortran) or 0 (C). On failure out is
  ! c_null_ptr.
  interface autopcg_create
    function autopcg_create_i32(n, indptr, indices, values, base, opts, out) result(status) &
        bind(C, name="autopcg_create_i32")
      import :: c_int, c_int32_t, c_double, c_ptr, autopcg_options
      integer(c_int32_t), value :: n
      integer(c_int32_t), intent(in) :: indptr(*), indices(*)
      real(c_double), intent(in) :: values(*)
      integer(c_int), value :: base
      type(autopcg_options), intent(in), optional :: opts
      type(c_ptr), intent(out) :: out
      integer(c_int) :: status
    end function autopcg_create_i32

    function autopcg_create_i64(n, indptr, indices, values, base, opts, out) result(status) &
        bind(C, name="autopcg_create_i64")
      import :: c_int, c_int64_t, c_double, c_ptr, autopcg_options
      integer(c_int64_t), value :: n
      integer(c_int64_t), intent(in) :: indptr(*), indices(*)
      real(c_double), intent(in) :: values(*)
      integer(c_int), value :: base
      type(autopcg_options), intent(in), optional :: opts
      type(c_ptr), intent(out) :: out
      integer(c_int) :: status
    end function autopcg_create_i64
  end interface autopcg_create

  interface
    ! Fills opts with the defaults.
    function autopcg_options_init(opts) result(status) bind(C, name="autopcg_options_init")
      import :: c_int, autopcg_options
      type(autopcg_options), intent(out) :: opts
      integer(c_int) :: status
    end function autopcg_options_init

    ! Solves A x = b (n entries each) from x0 (zero when absent; it may be x itself).
    function autopcg_solve(s, b, x, x0, info) result(status) bind(C, name="autopcg_solve")
      import :: c_int, c_double, c_ptr, autopcg_info
      type(c_ptr), value :: s
      real(c_double), intent(in) :: b(*)
      real(c_double), intent(inout) :: x(*)
      real(c_double), intent(in), optional :: x0(*)
      type(autopcg_info), intent(out), optional :: info
      integer(c_int) :: status
    end function autopcg_solve

    ! Solves for the nrhs columns of b(n, nrhs) into x(n, nrhs); info(nrhs).
    function autopcg_solve_many(s, nrhs, b, x, x0, info) result(status) &
        bind(C, name="autopcg_solve_many")
      import :: c_int, c_int64_t, c_double, c_ptr, autopcg_info
      type(c_ptr), value :: s
      integer(c_int64_t), value :: nrhs
      real(c_double), intent(in) :: b(*)
      real(c_double), intent(inout) :: x(*)
      real(c_double), intent(in), optional :: x0(*)
      type(autopcg_info), intent(out), optional :: info(*)
      integer(c_int) :: status
    end function autopcg_solve_many

    ! New values of the same pattern, in the order and storage given to autopcg_create.
    function autopcg_update_values(s, values) result(status) &
        bind(C, name="autopcg_update_values")
      import :: c_int, c_double, c_ptr
      type(c_ptr), value :: s
      real(c_double), intent(in) :: values(*)
      integer(c_int) :: status
    end function autopcg_update_values

    function autopcg_set_tolerances(s, rtol, atol) result(status) &
        bind(C, name="autopcg_set_tolerances")
      import :: c_int, c_double, c_ptr
      type(c_ptr), value :: s
      real(c_double), value :: rtol, atol
      integer(c_int) :: status
    end function autopcg_set_tolerances

    function autopcg_set_max_iter(s, max_iter) result(status) &
        bind(C, name="autopcg_set_max_iter")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: s
      integer(c_int64_t), value :: max_iter
      integer(c_int) :: status
    end function autopcg_set_max_iter

    function autopcg_get_n(s, n) result(status) bind(C, name="autopcg_get_n")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: s
      integer(c_int64_t), intent(out) :: n
      integer(c_int) :: status
    end function autopcg_get_n

    function autopcg_get_nnz(s, nnz) result(status) bind(C, name="autopcg_get_nnz")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: s
      integer(c_int64_t), intent(out) :: nnz
      integer(c_int) :: status
    end function autopcg_get_nnz

    function autopcg_get_info(s, info) result(status) bind(C, name="autopcg_get_info")
      import :: c_int, c_ptr, autopcg_info
      type(c_ptr), value :: s
      type(autopcg_info), intent(out) :: info
      integer(c_int) :: status
    end function autopcg_get_info

    function autopcg_get_iterations(s, iterations) result(status) &
        bind(C, name="autopcg_get_iterations")
      import :: c_int, c_int64_t, c_ptr
      type(c_ptr), value :: s
      integer(c_int64_t), intent(out) :: iterations
      integer(c_int) :: status
    end function autopcg_get_iterations

    function autopcg_get_residual(s, residual) result(status) &
        bind(C, name="autopcg_get_residual")
      import :: c_int, c_double, c_ptr
      type(c_ptr), value :: s
      real(c_double), intent(out) :: residual
      integer(c_int) :: status
    end function autopcg_get_residual

    function autopcg_get_setup(s, setup) result(status) bind(C, name="autopcg_get_setup")
      import :: c_int, c_ptr, autopcg_setup
      type(c_ptr), value :: s
      type(autopcg_setup), intent(out) :: setup
      integer(c_int) :: status
    end function autopcg_get_setup

    ! Destroys a handle (c_null_ptr is ignored); set your variable to c_null_ptr after.
    subroutine autopcg_destroy(s) bind(C, name="autopcg_destroy")
      import :: c_ptr
      type(c_ptr), value :: s
    end subroutine autopcg_destroy

    ! The C strings; autopcg_device_name and the others below return them as Fortran text.
    function autopcg_device(s) result(p) bind(C, name="autopcg_device")
      import :: c_ptr
      type(c_ptr), value :: s
      type(c_ptr) :: p
    end function autopcg_device

    function autopcg_precond(s) result(p) bind(C, name="autopcg_precond")
      import :: c_ptr
      type(c_ptr), value :: s
      type(c_ptr) :: p
    end function autopcg_precond

    function autopcg_last_error() result(p) bind(C, name="autopcg_last_error")
      import :: c_ptr
      type(c_ptr) :: p
    end function autopcg_last_error

    function autopcg_status_string(status) result(p) bind(C, name="autopcg_status_string")
      import :: c_int, c_ptr
      integer(c_int), value :: status
      type(c_ptr) :: p
    end function autopcg_status_string

    function autopcg_version() result(p) bind(C, name="autopcg_version")
      import :: c_ptr
      type(c_ptr) :: p
    end function autopcg_version

    ! Starts opening GPU ordinal (0 for the first) in the background, so that its context is
    ! created while the caller assembles its matrix; the next handle on that GPU takes it.
    function autopcg_open_gpu_ahead(ordinal) result(status) &
        bind(C, name="autopcg_open_gpu_ahead")
      import :: c_int
      integer(c_int), value :: ordinal
      integer(c_int) :: status
    end function autopcg_open_gpu_ahead

    ! autopcg_open_gpu_ahead for a matrix of rows rows and entries stored entries (both
    ! triangles): the device's other first-use costs of the first setup's upload are paid in
    ! the background too.
    function autopcg_open_gpu_ahead_for(ordinal, rows, entries) result(status) &
        bind(C, name="autopcg_open_gpu_ahead_for")
      import :: c_int, c_int64_t
      integer(c_int), value :: ordinal
      integer(c_int64_t), value :: rows, entries
      integer(c_int) :: status
    end function autopcg_open_gpu_ahead_for

    ! Waits for the opens started by autopcg_open_gpu_ahead that no handle has taken yet: call
    ! it before stopping without creating a handle.
    function autopcg_finish_opens_ahead() result(status) &
        bind(C, name="autopcg_finish_opens_ahead")
      import :: c_int
      integer(c_int) :: status
    end function autopcg_finish_opens_ahead

    function c_strlen(p) result(len) bind(C, name="strlen")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: p
      integer(c_size_t) :: len
    end function c_strlen
  end interface

contains

  ! A NUL-terminated C string as a Fortran string ("" for c_null_ptr).
  function from_c(p) result(str)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: str
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    if (.not. c_associated(p)) then
      str = ""
      return
    end if
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: str)
    do i = 1, n
      str(i:i) = chars(i)
    end do
  end function from_c

  ! The message of this thread's last failed call ("" after a success).
  function autopcg_error_message() result(str)
    character(len=:), allocatable :: str
    str = from_c(autopcg_last_error())
  end function autopcg_error_message

  ! Where the handle solves ("cpu (8 threads)", "gpu 0 (NVIDIA H200)").
  function autopcg_device_name(s) result(str)
    type(c_ptr), intent(in) :: s
    character(len=:), allocatable :: str
    str = from_c(autopcg_device(s))
  end function autopcg_device_name

  ! The preconditioner as applied ("ssor-ai-factored (omega 1.0000)").
  function autopcg_precond_name(s) result(str)
    type(c_ptr), intent(in) :: s
    character(len=:), allocatable :: str
    str = from_c(autopcg_precond(s))
  end function autopcg_precond_name

  ! The name of a status code ("ok", "not converged", ...).
  function autopcg_status_name(status) result(str)
    integer(c_int), intent(in) :: status
    character(len=:), allocatable :: str
    str = from_c(autopcg_status_string(status))
  end function autopcg_status_name

  function autopcg_version_string() result(str)
    character(len=:), allocatable :: str
    str = from_c(autopcg_version())
  end function autopcg_version_string

end module autopcg
